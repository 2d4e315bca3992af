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

// certificateRoles is the claim mapper: the role rides in Claims.Extensions, the subject's CN in
// Claims.Subject. Temporal's own roles stay empty: troupeAuthorizer is the only reader.
type certificateRoles struct{}

var _ authorization.ClaimMapper = certificateRoles{}

func (certificateRoles) GetClaims(info *authorization.AuthInfo) (*authorization.Claims, error) {
	if info == nil || info.TLSSubject == nil {
		// No certificate (only possible if the frontend's TLS stopped requiring one): no role.
		return &authorization.Claims{Extensions: roleNone}, nil
	}
	cn := info.TLSSubject.CommonName
	return &authorization.Claims{Subject: cn, Extensions: roleOfCommonName(cn)}, nil
}

func roleOf(claims *authorization.Claims) role {
	if claims == nil {
		return roleNone
	}
	r, _ := claims.Extensions.(role)
	return r
}
