package main

import (
	"context"
	"fmt"
	"strings"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/server/common/api"
	"go.temporal.io/server/common/authorization"
)

// troupeAuthorizer draws the line Temporal's default authorizer cannot: that one grants a role per
// namespace (read, write, admin) and knows API names, not workflow types, signal or Update names or
// workflow ids, so a namespace writer may poll task queues, start any workflow and send any message.
// Here a user may start, read and stop runs, and only workers may do what only workers should
// (README, Security). Its refusals say why; the frontend passes them on as PermissionDenied
// (frontend.exposeAuthorizerErrors in deploy/temporal/dynamicconfig.yaml).
type troupeAuthorizer struct{}

var _ authorization.Authorizer = troupeAuthorizer{}

func (troupeAuthorizer) Authorize(_ context.Context, claims *authorization.Claims, target *authorization.CallTarget) (authorization.Result, error) {
	if reason := refusal(callerOf(claims), subjectOf(claims), target.Namespace, target.APIName, target.Request); reason != "" {
		return authorization.Result{Decision: authorization.DecisionDeny, Reason: reason}, serviceerror.NewPermissionDenied(reason, "")
	}
	return authorization.Result{Decision: authorization.DecisionAllow}, nil
}

func subjectOf(claims *authorization.Claims) string {
	if claims == nil {
		return ""
	}
	return claims.Subject
}

// Troupe's names (workflows/index.ts, src/contract/messages.ts, src/contract/ids.ts).
const (
	runWorkflowType     = "RunWorkflow"
	readLogWorkflowType = "ReadJobLogWorkflow"
	runIDPrefix         = "run/"
	stopRunSignal       = "stopRun"
)

// What a user may send a run: stopRun; the other signals (jobEvents, unlockGroup, addressesReady,
// mayStart, newAttempts, startAttempts) pass between a run and its group workflows.
// The run's Updates a user may send: resize a group, deploy a service's new plan.
var userRunUpdates = map[string]bool{"scaleGroup": true, "applyService": true}

const workerOnly = "only workers may (the worker certificate, CN " + workerCN + ")"

// refusal is why this caller may not make this call in this namespace, or "" when it may.
func refusal(c caller, subject, namespace, apiName string, request any) string {
	if authorization.IsHealthCheckAPI(apiName) {
		return ""
	}
	if c.tokenRefused != "" {
		return c.tokenRefused
	}
	meta := api.GetMethodMetadata(apiName)
	method := api.MethodName(apiName)
	if reason := namespaceRefusal(c, subject, namespace, meta, method); reason != "" {
		return reason
	}
	switch c.role {
	case roleSystem:
		return ""
	case roleNone:
		if subject == "" {
			return "troupe: no client certificate: this deployment admits a client by its certificate (worker or user; deploy/make-certs.sh makes them)"
		}
		return fmt.Sprintf("troupe: the client certificate's subject CN=%q has no role in this deployment (%s for workers, %s or %s<name> for users)", subject, workerCN, userCN, userCNPrefix)
	case roleWorker:
		if meta.Scope == api.ScopeNamespace && meta.Access != api.AccessAdmin || meta.Scope == api.ScopeCluster && meta.Access == api.AccessReadOnly {
			return ""
		}
		return fmt.Sprintf("troupe: %s is for the deployment's operators (the services' certificate), not workers", method)
	case roleUser:
		if meta.Access == api.AccessReadOnly && (meta.Scope == api.ScopeNamespace || meta.Scope == api.ScopeCluster) {
			return ""
		}
		return userWriteRefusal(method, request)
	}
	return "troupe: unknown role"
}

// namespaceRefusal: a token's holder acts in the namespaces it names only, and reads only where it
// names a reader. A certificate's role (no token) holds in every namespace.
func namespaceRefusal(c caller, subject, namespace string, meta api.MethodMetadata, method string) string {
	if c.namespaces == nil || meta.Scope != api.ScopeNamespace {
		return ""
	}
	g, ok := c.namespaces[namespace]
	if !ok {
		return fmt.Sprintf("troupe: the token of %q names the namespaces %s, not %q: a token's holder acts in its team's namespaces only", subject, names(c.namespaces), namespace)
	}
	if g == grantReader && meta.Access != api.AccessReadOnly {
		return fmt.Sprintf("troupe: the token of %q may read namespace %q (reader), not call %s there", subject, namespace, method)
	}
	return ""
}

// userWriteRefusal: the writes a user may make are about runs, by the run's workflow id.
func userWriteRefusal(method string, request any) string {
	switch req := request.(type) {
	case *workflowservice.StartWorkflowExecutionRequest:
		id, kind := req.GetWorkflowId(), req.GetWorkflowType().GetName()
		switch {
		case kind == runWorkflowType && isRunID(id):
			return ""
		// `troupe logs`: a job's log is read on a worker, by a workflow the CLI starts; what it reads
		// is a log users may read for every run they may describe.
		case kind == readLogWorkflowType && isLogReaderID(id):
			return ""
		}
		return fmt.Sprintf("troupe: a user may start %s (id run/<name>) and %s (id run/<name>/log/...), not %s with id %q: %s", runWorkflowType, readLogWorkflowType, kind, id, workerOnly)
	case *workflowservice.SignalWorkflowExecutionRequest:
		id, name := req.GetWorkflowExecution().GetWorkflowId(), req.GetSignalName()
		if name == stopRunSignal && isRunID(id) {
			return ""
		}
		return fmt.Sprintf("troupe: a user may send a run (run/<name>) the signal %s only, not %s to %q: a run's internal signals pass between its workflows; %s", stopRunSignal, name, id, workerOnly)
	case *workflowservice.UpdateWorkflowExecutionRequest:
		id, name := req.GetWorkflowExecution().GetWorkflowId(), req.GetRequest().GetInput().GetName()
		if userRunUpdates[name] && isRunID(id) {
			return ""
		}
		return fmt.Sprintf("troupe: a user may send a run (run/<name>) the Updates scaleGroup and applyService only, not %s to %q: a fleet's Updates take and give back machines; %s", name, id, workerOnly)
	case *workflowservice.RequestCancelWorkflowExecutionRequest:
		return runTargetRefusal(method, req.GetWorkflowExecution().GetWorkflowId())
	case *workflowservice.TerminateWorkflowExecutionRequest:
		return runTargetRefusal(method, req.GetWorkflowExecution().GetWorkflowId())
	}
	if strings.HasPrefix(method, "Poll") || strings.HasPrefix(method, "Respond") || strings.HasPrefix(method, "RecordActivityTaskHeartbeat") {
		return fmt.Sprintf("troupe: %s: polling task queues and answering their tasks is a worker's; %s", method, workerOnly)
	}
	return fmt.Sprintf("troupe: a user may not call %s: %s", method, workerOnly)
}

func runTargetRefusal(method, id string) string {
	if isRunID(id) {
		return ""
	}
	return fmt.Sprintf("troupe: a user may %s runs (run/<name>) only, not %q: %s", method, id, workerOnly)
}

// isRunID: run/<name>, as runWorkflowId makes it (src/contract/ids.ts); not a group's or a log reader's.
func isRunID(id string) bool {
	name, ok := strings.CutPrefix(id, runIDPrefix)
	return ok && name != "" && !strings.Contains(name, "/")
}

// isLogReaderID: run/<name>/log/<job>/<nonce>, as logReaderWorkflowId makes it.
func isLogReaderID(id string) bool {
	parts := strings.Split(id, "/")
	return len(parts) == 5 && parts[0]+"/" == runIDPrefix && parts[1] != "" && parts[2] == "log" && parts[3] != "" && parts[4] != ""
}
