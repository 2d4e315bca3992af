package main

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v4"
	"go.temporal.io/server/common/api"
	"go.temporal.io/server/common/authorization"
)

func rsaKey(t *testing.T) *rsa.PrivateKey {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	return key
}

func mint(t *testing.T, key any, method jwt.SigningMethod, claims jwt.MapClaims) string {
	t.Helper()
	signed, err := jwt.NewWithClaims(method, claims).SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return "Bearer " + signed
}

func userToken(sub string, ttl time.Duration, permissions ...string) jwt.MapClaims {
	now := time.Now()
	return jwt.MapClaims{"sub": sub, "iat": now.Unix(), "exp": now.Add(ttl).Unix(), "permissions": permissions}
}

func TestTokenKeyFile(t *testing.T) {
	key := rsaKey(t)
	der, _ := x509.MarshalPKIXPublicKey(&key.PublicKey)
	path := filepath.Join(t.TempDir(), "token.pub")
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
	loaded, err := loadTokenKey(path)
	if err != nil || !loaded.public.Equal(&key.PublicKey) {
		t.Fatalf("loadTokenKey: %v", err)
	}
	if _, err := loadTokenKey(filepath.Join(t.TempDir(), "none.pub")); err == nil {
		t.Error("a missing key file must fail")
	}
}

func TestTokens(t *testing.T) {
	key, other := rsaKey(t), rsaKey(t)
	mapper := callerClaims{tokens: tokenKey{public: &key.PublicKey}}
	userCert := &pkix.Name{CommonName: "troupe-user"}
	claimsOf := func(header string, cert *pkix.Name) *authorization.Claims {
		t.Helper()
		claims, err := mapper.GetClaims(&authorization.AuthInfo{AuthToken: header, TLSSubject: cert})
		if err != nil {
			t.Fatalf("GetClaims must not fail (its refusals ride in the claims): %v", err)
		}
		return claims
	}

	good := claimsOf(mint(t, key, jwt.SigningMethodRS256, userToken("ada", time.Hour, "team-a:user", "team-b:reader")), userCert)
	if c := callerOf(good); c.role != roleUser || good.Subject != "ada" || c.namespaces["team-a"] != grantUser || c.namespaces["team-b"] != grantReader || len(c.namespaces) != 2 {
		t.Fatalf("a good token: %+v subject %q", c, good.Subject)
	}
	// With a token, the token decides: a worker's certificate carrying one is a user in its namespaces.
	if c := callerOf(claimsOf(mint(t, key, jwt.SigningMethodRS256, userToken("ada", time.Hour, "team-a:user")), &pkix.Name{CommonName: "troupe-worker"})); c.role != roleUser {
		t.Errorf("a token on a worker certificate: role %q, want user", c.role)
	}

	// A certificate whose CN has no role, with a token: a user in the token's namespaces (how a team's
	// rights alone are handed out); without one, nothing.
	if c := callerOf(claimsOf(mint(t, key, jwt.SigningMethodRS256, userToken("ada", time.Hour, "team-a:user")), &pkix.Name{CommonName: "troupe-client"})); c.role != roleUser || c.namespaces["team-a"] != grantUser {
		t.Errorf("a token on a role-less certificate: %+v", c)
	}

	ws := func(m string) string { return api.WorkflowServicePrefix + m }
	for _, c := range []struct {
		name, header, namespace, api string
		request                      any
		says                         string // "" when allowed
	}{
		{"start a run in its namespace", mint(t, key, jwt.SigningMethodRS256, userToken("ada", time.Hour, "team-a:user")), "team-a", ws("StartWorkflowExecution"), start("RunWorkflow", "run/x"), ""},
		{"stop a run in its namespace", mint(t, key, jwt.SigningMethodRS256, userToken("ada", time.Hour, "team-a:user")), "team-a", ws("SignalWorkflowExecution"), signal("run/x", "stopRun"), ""},
		{"list in its namespace", mint(t, key, jwt.SigningMethodRS256, userToken("ada", time.Hour, "team-a:user")), "team-a", ws("ListWorkflowExecutions"), nil, ""},
		{"cluster reads need no namespace", mint(t, key, jwt.SigningMethodRS256, userToken("ada", time.Hour, "team-a:user")), "", ws("GetSystemInfo"), nil, ""},
		{"another namespace", mint(t, key, jwt.SigningMethodRS256, userToken("ada", time.Hour, "team-a:user")), "team-b", ws("ListWorkflowExecutions"), nil,
			`troupe: the token of "ada" names the namespaces team-a (user), not "team-b": a token's holder acts in its team's namespaces only`},
		{"a user is no worker in its namespace", mint(t, key, jwt.SigningMethodRS256, userToken("ada", time.Hour, "team-a:user")), "team-a", ws("SignalWorkflowExecution"), signal("run/x", "jobEvents"), "internal signals"},
		{"nor polls", mint(t, key, jwt.SigningMethodRS256, userToken("ada", time.Hour, "team-a:user")), "team-a", ws("PollActivityTaskQueue"), nil, "polling task queues"},
		{"a reader reads", mint(t, key, jwt.SigningMethodRS256, userToken("bo", time.Hour, "team-b:reader")), "team-b", ws("DescribeWorkflowExecution"), nil, ""},
		{"a reader may not start", mint(t, key, jwt.SigningMethodRS256, userToken("bo", time.Hour, "team-b:reader")), "team-b", ws("StartWorkflowExecution"), start("RunWorkflow", "run/x"),
			`troupe: the token of "bo" may read namespace "team-b" (reader), not call StartWorkflowExecution there`},
		{"user wins over reader", mint(t, key, jwt.SigningMethodRS256, userToken("bo", time.Hour, "team-b:user", "team-b:reader")), "team-b", ws("StartWorkflowExecution"), start("RunWorkflow", "run/x"), ""},
		{"expired", mint(t, key, jwt.SigningMethodRS256, userToken("ada", -time.Minute, "team-a:user")), "team-a", ws("ListWorkflowExecutions"), nil, `troupe: the token of "ada" expired at `},
		{"signed by another key", mint(t, other, jwt.SigningMethodRS256, userToken("ada", time.Hour, "team-a:user")), "team-a", ws("ListWorkflowExecutions"), nil, "signature is not this deployment's token key's"},
		{"HMAC with the public key as secret", mint(t, x509.MarshalPKCS1PublicKey(&key.PublicKey), jwt.SigningMethodHS256, userToken("ada", time.Hour, "team-a:user")), "team-a", ws("ListWorkflowExecutions"), nil, "signature is not"},
		{"no expiry", mint(t, key, jwt.SigningMethodRS256, jwt.MapClaims{"sub": "ada", "permissions": []string{"team-a:user"}}), "team-a", ws("ListWorkflowExecutions"), nil, "no expiry"},
		{"asks for a worker", mint(t, key, jwt.SigningMethodRS256, userToken("ada", time.Hour, "team-a:worker")), "team-a", ws("PollWorkflowTaskQueue"), nil, `grants "team-a:worker": a token grants <namespace>:user or <namespace>:reader only`},
		{"asks for the system", mint(t, key, jwt.SigningMethodRS256, userToken("ada", time.Hour, "temporal-system:admin")), "", ws("RegisterNamespace"), nil, "grants \"temporal-system:admin\""},
		{"no subject", mint(t, key, jwt.SigningMethodRS256, userToken("", time.Hour, "team-a:user")), "team-a", ws("ListWorkflowExecutions"), nil, "names no subject"},
		{"no namespace", mint(t, key, jwt.SigningMethodRS256, userToken("ada", time.Hour)), "team-a", ws("ListWorkflowExecutions"), nil, "names no namespace"},
		{"garbage", "Bearer not.a.jwt", "team-a", ws("ListWorkflowExecutions"), nil, "not one this deployment takes"},
		{"not bearer", "Basic abc", "team-a", ws("ListWorkflowExecutions"), nil, "not `Bearer <token>`"},
		{"a bad token still passes health checks", "Bearer not.a.jwt", "", "/grpc.health.v1.Health/Check", nil, ""},
	} {
		claims := claimsOf(c.header, userCert)
		got := refusal(callerOf(claims), subjectOf(claims), c.namespace, c.api, c.request)
		if (got == "") != (c.says == "") || !strings.Contains(got, c.says) {
			t.Errorf("%s: refusal %q, want %q", c.name, got, c.says)
		}
	}

	// A server without a token key refuses tokens, and says so; certificates alone still work there.
	none := callerClaims{}
	claims, _ := none.GetClaims(&authorization.AuthInfo{AuthToken: mint(t, key, jwt.SigningMethodRS256, userToken("ada", time.Hour, "team-a:user")), TLSSubject: userCert})
	if got := refusal(callerOf(claims), "", "team-a", ws("ListWorkflowExecutions"), nil); !strings.Contains(got, "takes no tokens") {
		t.Errorf("no token key: %q", got)
	}
	claims, _ = none.GetClaims(&authorization.AuthInfo{TLSSubject: userCert})
	if got := refusal(callerOf(claims), claims.Subject, "any-namespace", ws("ListWorkflowExecutions"), nil); got != "" {
		t.Errorf("a user certificate without a token: %q", got)
	}
}

// The scripts' keys and tokens are the ones the server takes: deploy/make-certs.sh makes the key
// pair, deploy/make-token.sh mints with openssl alone.
func TestScriptsMintTokensTheServerTakes(t *testing.T) {
	dir := t.TempDir()
	run := func(name string, args ...string) string {
		t.Helper()
		out, err := exec.Command(name, args...).Output()
		if err != nil {
			t.Fatalf("%s %v: %v", name, args, err)
		}
		return strings.TrimSpace(string(out))
	}
	run("sh", "../make-certs.sh", dir)
	if info, err := os.Stat(filepath.Join(dir, "token.key")); err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("token.key must be 0600: %v %v", info, err)
	}
	key, err := loadTokenKey(filepath.Join(dir, "token.pub"))
	if err != nil {
		t.Fatal(err)
	}
	token := run("bash", "../make-token.sh", "--key", filepath.Join(dir, "token.key"), "--namespace", "team-a,team-b", "--sub", "ada@example.org", "--ttl", "2h")
	subject, namespaces, refused := key.verify("Bearer " + token)
	if refused != "" || subject != "ada@example.org" || len(namespaces) != 2 || namespaces["team-a"] != grantUser || namespaces["team-b"] != grantUser {
		t.Fatalf("a minted token: %q %v %q", subject, namespaces, refused)
	}
	var claims tokenClaims
	if _, _, err := jwt.NewParser().ParseUnverified(token, &claims); err != nil || claims.ExpiresAt.Sub(claims.IssuedAt.Time) != 2*time.Hour {
		t.Errorf("exp - iat must be the ttl: %v %v", claims, err)
	}
	reader := run("bash", "../make-token.sh", "--key", filepath.Join(dir, "token.key"), "--namespace", "team-b", "--sub", "bo", "--ttl", "1m", "--reader")
	if _, namespaces, _ := key.verify("Bearer " + reader); namespaces["team-b"] != grantReader {
		t.Errorf("--reader: %v", namespaces)
	}
	if out, err := exec.Command("bash", "../make-token.sh", "--key", filepath.Join(dir, "token.key"), "--namespace", "a b", "--sub", "x").CombinedOutput(); err == nil || !strings.Contains(string(out), "not a namespace name") {
		t.Errorf("a bad namespace must be refused: %s", out)
	}
}
