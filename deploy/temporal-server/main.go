// The Temporal server for Troupe's production deployment: the release's services (go.temporal.io/server
// at the version go.mod pins) with Troupe's claim mapper and authorizer (roles.go, authorizer.go) in
// place of the configurable ones, which know namespaces and roles but not workflow types. Users' tokens
// (tokens.go) are checked with the public key the file TROUPE_TEMPORAL_TOKEN_KEY holds.
//
//	troupe-temporal-server --root DIR --config config --env troupe start --service NAME [--service NAME]...
//
// The same flags as the release's `server` binary, without --allow-no-auth: this one always authorizes.
package main

import (
	"flag"
	"fmt"
	"os"
	"path"

	"go.temporal.io/server/common/authorization"
	"go.temporal.io/server/common/config"
	"go.temporal.io/server/common/dynamicconfig"
	"go.temporal.io/server/common/log"
	_ "go.temporal.io/server/common/persistence/sql/sqlplugin/postgresql" // Troupe's deployments run on PostgreSQL
	"go.temporal.io/server/temporal"
)

type services []string

func (s *services) String() string     { return fmt.Sprint(*s) }
func (s *services) Set(v string) error { *s = append(*s, v); return nil }

func main() {
	global := flag.NewFlagSet("troupe-temporal-server", flag.ExitOnError)
	root := global.String("root", ".", "root directory of the server's files")
	configDir := global.String("config", "config", "config directory, relative to --root")
	env := global.String("env", "development", "the config file's name (without .yaml)")
	_ = global.Parse(os.Args[1:])
	if global.Arg(0) != "start" {
		fail("usage: troupe-temporal-server --root DIR --config DIR --env NAME start --service NAME...")
	}
	start := flag.NewFlagSet("start", flag.ExitOnError)
	var names services
	start.Var(&names, "service", "a service to run (frontend, history, matching, worker); repeat for several")
	_ = start.Parse(global.Args()[1:])
	if len(names) == 0 {
		names = temporal.DefaultServices
	}

	cfg, err := config.LoadConfig(*env, path.Join(*root, *configDir), "")
	if err != nil {
		fail("cannot load the configuration: %v", err)
	}
	logger := log.NewZapLogger(log.BuildZapLogger(cfg.Log))
	var dynamic dynamicconfig.Client = dynamicconfig.NewNoopClient()
	if cfg.DynamicConfigClient != nil {
		if dynamic, err = dynamicconfig.NewFileBasedClient(cfg.DynamicConfigClient, logger, temporal.InterruptCh()); err != nil {
			fail("cannot read the dynamic config: %v", err)
		}
	}
	// The deployment's public token key (deploy/make-certs.sh: token.pub); without one, tokens are refused.
	var tokens tokenKey
	if path := os.Getenv("TROUPE_TEMPORAL_TOKEN_KEY"); path != "" {
		if tokens, err = loadTokenKey(path); err != nil {
			fail("cannot read the token key (TROUPE_TEMPORAL_TOKEN_KEY): %v", err)
		}
	}
	server, err := temporal.NewServer(
		temporal.ForServices(names),
		temporal.WithConfig(cfg),
		temporal.WithDynamicConfigClient(dynamic),
		temporal.WithLogger(logger),
		temporal.InterruptOn(temporal.InterruptCh()),
		temporal.WithAuthorizer(troupeAuthorizer{}),
		temporal.WithClaimMapper(func(*config.Config) authorization.ClaimMapper { return callerClaims{tokens: tokens} }),
	)
	if err != nil {
		fail("cannot create the server: %v", err)
	}
	if err := server.Start(); err != nil {
		fail("cannot start the server: %v", err)
	}
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "troupe-temporal-server: "+format+"\n", args...)
	os.Exit(1)
}
