package main

import (
	"crypto/x509/pkix"
	"strings"
	"testing"

	commonpb "go.temporal.io/api/common/v1"
	updatepb "go.temporal.io/api/update/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/server/common/api"
	"go.temporal.io/server/common/authorization"
)

func start(kind, id string) *workflowservice.StartWorkflowExecutionRequest {
	return &workflowservice.StartWorkflowExecutionRequest{WorkflowId: id, WorkflowType: &commonpb.WorkflowType{Name: kind}}
}

func signal(id, name string) *workflowservice.SignalWorkflowExecutionRequest {
	return &workflowservice.SignalWorkflowExecutionRequest{WorkflowExecution: &commonpb.WorkflowExecution{WorkflowId: id}, SignalName: name}
}

func update(id, name string) *workflowservice.UpdateWorkflowExecutionRequest {
	return &workflowservice.UpdateWorkflowExecutionRequest{
		WorkflowExecution: &commonpb.WorkflowExecution{WorkflowId: id},
		Request:           &updatepb.Request{Input: &updatepb.Input{Name: name}},
	}
}

func TestRoles(t *testing.T) {
	for cn, want := range map[string]role{
		"troupe-server": roleSystem, "troupe-worker": roleWorker, "troupe-user": roleUser, "troupe-user-ada": roleUser,
		"troupe-user-": roleNone, "troupe-client": roleNone, "troupe-workers": roleNone, "": roleNone,
	} {
		claims, err := callerClaims{}.GetClaims(&authorization.AuthInfo{TLSSubject: &pkix.Name{CommonName: cn}})
		if err != nil || roleOf(claims) != want {
			t.Errorf("CN %q: role %q (%v), want %q", cn, roleOf(claims), err, want)
		}
	}
	claims, _ := callerClaims{}.GetClaims(&authorization.AuthInfo{})
	if roleOf(claims) != roleNone || roleOf(nil) != roleNone {
		t.Errorf("no certificate must have no role")
	}
}

func TestRefusal(t *testing.T) {
	ws := func(m string) string { return api.WorkflowServicePrefix + m }
	op := func(m string) string { return api.OperatorServicePrefix + m }
	for _, c := range []struct {
		role    role
		api     string
		request any
		allowed bool
		says    string
	}{
		{roleUser, ws("StartWorkflowExecution"), start("RunWorkflow", "run/train"), true, ""},
		{roleUser, ws("StartWorkflowExecution"), start("ReadJobLogWorkflow", "run/train/log/0/abc"), true, ""},
		{roleUser, ws("StartWorkflowExecution"), start("FleetWorkflow", "fleet/gpus"), false, "not FleetWorkflow"},
		{roleUser, ws("StartWorkflowExecution"), start("NodeGroupWorkflow", "run/train/group/a"), false, "NodeGroupWorkflow"},
		{roleUser, ws("StartWorkflowExecution"), start("RunWorkflow", "run/train/group/a"), false, "RunWorkflow"},
		{roleUser, ws("StartWorkflowExecution"), start("ReadJobLogWorkflow", "run/train"), false, "ReadJobLogWorkflow"},
		{roleUser, ws("SignalWorkflowExecution"), signal("run/train", "stopRun"), true, ""},
		{roleUser, ws("SignalWorkflowExecution"), signal("run/train", "jobEvents"), false, "internal signals"},
		{roleUser, ws("SignalWorkflowExecution"), signal("run/train/group/a", "stopRun"), false, "stopRun only"},
		{roleUser, ws("UpdateWorkflowExecution"), update("run/train", "scaleGroup"), true, ""},
		{roleUser, ws("UpdateWorkflowExecution"), update("run/svc", "applyService"), true, ""},
		{roleUser, ws("UpdateWorkflowExecution"), update("fleet/gpus", "allocateHosts"), false, "fleet's Updates"},
		{roleUser, ws("UpdateWorkflowExecution"), update("run/train", "allocateHosts"), false, "allocateHosts"},
		{roleUser, ws("TerminateWorkflowExecution"), &workflowservice.TerminateWorkflowExecutionRequest{WorkflowExecution: &commonpb.WorkflowExecution{WorkflowId: "run/train"}}, true, ""},
		{roleUser, ws("TerminateWorkflowExecution"), &workflowservice.TerminateWorkflowExecutionRequest{WorkflowExecution: &commonpb.WorkflowExecution{WorkflowId: "fleet/gpus"}}, false, "runs (run/<name>) only"},
		{roleUser, ws("RequestCancelWorkflowExecution"), &workflowservice.RequestCancelWorkflowExecutionRequest{WorkflowExecution: &commonpb.WorkflowExecution{WorkflowId: "run/train/group/a"}}, false, "runs (run/<name>) only"},
		{roleUser, ws("PollWorkflowTaskQueue"), &workflowservice.PollWorkflowTaskQueueRequest{}, false, "polling task queues"},
		{roleUser, ws("PollActivityTaskQueue"), &workflowservice.PollActivityTaskQueueRequest{}, false, "polling task queues"},
		{roleUser, ws("RespondActivityTaskCompleted"), &workflowservice.RespondActivityTaskCompletedRequest{}, false, "worker certificate"},
		{roleUser, ws("SignalWithStartWorkflowExecution"), &workflowservice.SignalWithStartWorkflowExecutionRequest{}, false, "may not call SignalWithStartWorkflowExecution"},
		{roleUser, ws("ExecuteMultiOperation"), &workflowservice.ExecuteMultiOperationRequest{}, false, "may not call"},
		{roleUser, ws("StartBatchOperation"), &workflowservice.StartBatchOperationRequest{}, false, "may not call"},
		{roleUser, ws("QueryWorkflow"), &workflowservice.QueryWorkflowRequest{}, true, ""},
		{roleUser, ws("ListWorkflowExecutions"), nil, true, ""},
		{roleUser, ws("DescribeTaskQueue"), nil, true, ""},
		{roleUser, ws("PollWorkflowExecutionUpdate"), nil, true, ""},
		{roleUser, op("ListSearchAttributes"), nil, true, ""},
		{roleUser, op("AddSearchAttributes"), nil, false, "may not call"},
		{roleUser, ws("RegisterNamespace"), nil, false, "may not call"},
		{roleWorker, ws("PollWorkflowTaskQueue"), nil, true, ""},
		{roleWorker, ws("UpdateWorkflowExecution"), update("fleet/gpus", "allocateHosts"), true, ""},
		{roleWorker, ws("ExecuteMultiOperation"), nil, true, ""},
		{roleWorker, ws("StartWorkflowExecution"), start("ReadJobLogWorkflow", "run/x/log/0/n"), true, ""},
		{roleWorker, op("AddSearchAttributes"), nil, false, "operators"},
		{roleWorker, ws("RegisterNamespace"), nil, false, "operators"},
		{roleWorker, api.AdminServicePrefix + "DescribeCluster", nil, false, "operators"},
		{roleSystem, op("AddSearchAttributes"), nil, true, ""},
		{roleSystem, ws("RegisterNamespace"), nil, true, ""},
		{roleNone, ws("ListWorkflowExecutions"), nil, false, "no client certificate"},
		{roleNone, ws("GetSystemInfo"), nil, true, ""},
		{roleNone, "/grpc.health.v1.Health/Check", nil, true, ""},
	} {
		got := refusal(caller{role: c.role}, "", "default", c.api, c.request)
		if (got == "") != c.allowed || !strings.Contains(got, c.says) {
			t.Errorf("%s %s %v: refusal %q, want allowed=%v saying %q", c.role, c.api, c.request, got, c.allowed, c.says)
		}
	}
	if got := refusal(caller{role: roleNone}, "stranger", "default", ws("ListWorkflowExecutions"), nil); !strings.Contains(got, `CN="stranger" has no role`) {
		t.Errorf("an unknown CN: %q", got)
	}
}
