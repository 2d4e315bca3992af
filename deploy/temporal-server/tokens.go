package main

import (
	"crypto/rsa"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v4"
)

// Users' tokens: JWTs (RS256) signed with the deployment's token key, which deploy/make-certs.sh makes
// beside the certificates (token.key, token.pub) and deploy/make-token.sh signs with. A token names
// the namespaces its holder may act in, in Temporal's usual `permissions` claim form:
// "<namespace>:user" (start, read and stop runs) or "<namespace>:reader" (read only). A namespace is
// a team: a token's holder is a user in the namespaces it names and nowhere else. A token never makes
// a worker or the system: those roles stay with the worker's and the services' certificates.

// grant is what a token gives in one namespace.
type grant string

const (
	grantUser   grant = "user"
	grantReader grant = "reader"
)

// tokenKey verifies tokens; its zero value (no key: the server was started without one) refuses them.
type tokenKey struct{ public *rsa.PublicKey }

// loadTokenKey reads the deployment's public token key (PEM), the file TROUPE_TEMPORAL_TOKEN_KEY names.
func loadTokenKey(path string) (tokenKey, error) {
	pem, err := os.ReadFile(path)
	if err != nil {
		return tokenKey{}, err
	}
	public, err := jwt.ParseRSAPublicKeyFromPEM(pem)
	if err != nil {
		return tokenKey{}, fmt.Errorf("%s: %w", path, err)
	}
	return tokenKey{public: public}, nil
}

type tokenClaims struct {
	Permissions []string `json:"permissions"`
	jwt.RegisteredClaims
}

const mintAdvice = "mint one with deploy/make-token.sh"

// verify checks an `authorization` header's token: the subject and the namespaces it grants, or why
// this deployment does not take it (a refusal the authorizer passes on to the caller).
func (k tokenKey) verify(header string) (subject string, namespaces map[string]grant, refused string) {
	scheme, raw, ok := strings.Cut(strings.TrimSpace(header), " ")
	if !ok || !strings.EqualFold(scheme, "bearer") || strings.TrimSpace(raw) == "" {
		return "", nil, "troupe: the authorization header is not `Bearer <token>`"
	}
	if k.public == nil {
		return "", nil, "troupe: this deployment takes no tokens (its server was started without a token key, TROUPE_TEMPORAL_TOKEN_KEY); connect with a certificate alone"
	}
	var claims tokenClaims
	// Only RS256: a token cannot choose how it is checked (no "none", no HMAC keyed by the public key).
	parser := jwt.NewParser(jwt.WithValidMethods([]string{jwt.SigningMethodRS256.Alg()}))
	_, err := parser.ParseWithClaims(strings.TrimSpace(raw), &claims, func(*jwt.Token) (any, error) { return k.public, nil })
	switch {
	case errors.Is(err, jwt.ErrTokenExpired):
		return "", nil, fmt.Sprintf("troupe: the token of %q expired at %s; %s", claims.Subject, claims.ExpiresAt.UTC().Format(time.RFC3339), mintAdvice)
	case errors.Is(err, jwt.ErrTokenNotValidYet):
		return "", nil, fmt.Sprintf("troupe: the token of %q is not valid yet (issued in the future: check the clocks)", claims.Subject)
	case errors.Is(err, jwt.ErrTokenSignatureInvalid):
		return "", nil, "troupe: the token's signature is not this deployment's token key's; " + mintAdvice
	case err != nil:
		return "", nil, fmt.Sprintf("troupe: the token is not one this deployment takes (%v); %s", err, mintAdvice)
	}
	if claims.ExpiresAt == nil {
		return "", nil, "troupe: the token has no expiry (exp); " + mintAdvice
	}
	if claims.Subject == "" {
		return "", nil, "troupe: the token names no subject (sub); " + mintAdvice
	}
	namespaces = map[string]grant{}
	for _, p := range claims.Permissions {
		namespace, what, _ := strings.Cut(p, ":")
		g := grant(what)
		if namespace == "" || (g != grantUser && g != grantReader) {
			return "", nil, fmt.Sprintf("troupe: the token of %q grants %q: a token grants <namespace>:user or <namespace>:reader only; the worker and system roles are certificates'", claims.Subject, p)
		}
		if namespaces[namespace] != grantUser {
			namespaces[namespace] = g
		}
	}
	if len(namespaces) == 0 {
		return "", nil, fmt.Sprintf("troupe: the token of %q names no namespace (permissions); %s", claims.Subject, mintAdvice)
	}
	return claims.Subject, namespaces, ""
}

// names: the namespaces a token names, sorted, for a refusal's text.
func names(namespaces map[string]grant) string {
	list := make([]string, 0, len(namespaces))
	for ns, g := range namespaces {
		list = append(list, fmt.Sprintf("%s (%s)", ns, g))
	}
	sort.Strings(list)
	return strings.Join(list, ", ")
}
