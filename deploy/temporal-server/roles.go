package main

import (
	"strings"

	"go.temporal.io/server/common/authorization"
)

// A caller's role, from the subject of its mTLS client certificate (signed by the deployment's CA:
// the frontend refuses any other at the handshake). deploy/make-certs.sh makes one of each.
type role string

const (
	// roleSystem: the services' own certificate (CN troupe-server), which the internal worker service
	// shows the frontend, and with which deploy-local creates the namespace and search attributes.
	roleSystem role = "system"
	// roleWorker: `troupe worker` processes (CN troupe-worker), and operators applying fleets.
	roleWorker role = "worker"
	// roleUser: the CLI and SDK of people who run things (CN troupe-user, or troupe-user-<name>).
	roleUser role = "user"
	// roleNone: a certificate of the CA whose subject names no role here.
	roleNone role = ""
)

const (
	systemCN     = "troupe-server"
	workerCN     = "troupe-worker"
	userCN       = "troupe-user"
	userCNPrefix = "troupe-user-"
)

func roleOfCommonName(cn string) role {
	switch {
	case cn == systemCN:
		return roleSystem
	case cn == workerCN:
		return roleWorker
	case cn == userCN || (strings.HasPrefix(cn, userCNPrefix) && len(cn) > len(userCNPrefix)):
		return roleUser
	}
	return roleNone
}

// caller is who the claim mapper says made a call; it rides in Claims.Extensions, the subject (the
// certificate's CN, or the token's sub) in Claims.Subject. Temporal's own roles stay empty:
// troupeAuthorizer is the only reader.
type caller struct {
	role role
	// namespaces: what a token grants in each namespace it names; nil for a certificate's role,
	// which holds in every namespace.
	namespaces map[string]grant
	// tokenRefused: why the token shown is not one this deployment takes ("" when none or a good one).
	tokenRefused string
}

// callerClaims is the claim mapper. A call that carries a token (`authorization: Bearer <jwt>`) is a
// user's in the namespaces the token names, whatever certificate carried it: the token decides; the
// certificate (mTLS stays required: it must be the deployment CA's) only opened the connection. A call
// without one has its certificate's role.
type callerClaims struct{ tokens tokenKey }

var _ authorization.ClaimMapper = callerClaims{}

func (m callerClaims) GetClaims(info *authorization.AuthInfo) (*authorization.Claims, error) {
	if info != nil && info.AuthToken != "" {
		// A refused token is not an error here: Temporal would answer a claim mapper's error with a
		// bare "Request unauthorized"; the authorizer refuses with the reason instead.
		subject, namespaces, refused := m.tokens.verify(info.AuthToken)
		if refused != "" {
			return &authorization.Claims{Extensions: caller{role: roleNone, tokenRefused: refused}}, nil
		}
		return &authorization.Claims{Subject: subject, Extensions: caller{role: roleUser, namespaces: namespaces}}, nil
	}
	if info == nil || info.TLSSubject == nil {
		// No certificate (only possible if the frontend's TLS stopped requiring one): no role.
		return &authorization.Claims{Extensions: caller{role: roleNone}}, nil
	}
	cn := info.TLSSubject.CommonName
	return &authorization.Claims{Subject: cn, Extensions: caller{role: roleOfCommonName(cn)}}, nil
}

func callerOf(claims *authorization.Claims) caller {
	if claims == nil {
		return caller{role: roleNone}
	}
	c, _ := claims.Extensions.(caller)
	return c
}

func roleOf(claims *authorization.Claims) role { return callerOf(claims).role }
