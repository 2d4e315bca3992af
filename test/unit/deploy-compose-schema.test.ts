import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { z } from 'zod';
import { projectRoot, searchAttributes, serverTuning } from '../../src/devserver/dev-server';

/**
 * The deployment files checked without Docker: docker-compose.yml against a schema of the compose
 * subset Troupe uses plus the rules that make it Troupe's stack, and the worker's Dockerfile.
 * Each rule is also shown to fire on a broken copy, so none of them passes vacuously.
 */

const read = (path: string) => readFileSync(join(projectRoot, path), 'utf8');
const gitIgnored = new Set(read('.gitignore').split('\n').map((l) => l.trim()).filter((l) => l && !l.startsWith('#')));

// ---- docker-compose.yml: the subset we use ------------------------------------------------------

/** `name:1.2…`: a release tag. A floating tag (`latest`, `16`) changes under a running stack. */
const pinnedImage = z
  .string()
  .regex(/^[a-z0-9][a-z0-9._/-]*:v?\d+\.\d+[0-9A-Za-z._-]*$/, 'pin the image to a release tag (name:X.Y…), not latest or a major version');

/** Short syntax only, and only on loopback; a host port may come from `${VAR:-default}`. */
const loopbackPort = z
  .string()
  .regex(/^127\.0\.0\.1:(\d+|\$\{[A-Z0-9_]+:-\d+\}):\d+$/, 'publish ports on 127.0.0.1 only (127.0.0.1:HOST:CONTAINER)');

const duration = z.string().regex(/^\d+(ms|s|m|h)$/, 'a duration such as 10s');
const command = z.union([z.string().min(1), z.array(z.string()).min(1)]);

const healthcheck = z.strictObject({
  test: z.array(z.string()).min(2).refine((t) => t[0] === 'CMD' || t[0] === 'CMD-SHELL', 'test starts with CMD or CMD-SHELL'),
  interval: duration,
  timeout: duration,
  retries: z.number().int().positive(),
  start_period: duration.optional(),
});

const service = z
  .strictObject({
    image: pinnedImage.optional(),
    build: z.string().optional(),
    command: command.optional(),
    entrypoint: command.optional(),
    depends_on: z
      .record(
        z.string(),
        z.strictObject({ condition: z.enum(['service_started', 'service_healthy', 'service_completed_successfully']) }),
      )
      .optional(),
    environment: z.record(z.string(), z.string()).optional(),
    ports: z.array(loopbackPort).optional(),
    volumes: z.array(z.string().regex(/^([^:]+:)?\/[^:]*(:ro|:rw)?$/, '[SOURCE:]/TARGET[:ro]')).optional(),
    healthcheck: healthcheck.optional(),
    restart: z.enum(['no', 'always', 'on-failure', 'unless-stopped']),
    init: z.boolean().optional(),
    stop_grace_period: duration.optional(),
    cap_drop: z.array(z.string()).optional(),
    security_opt: z.array(z.string()).optional(),
    deploy: z.strictObject({ replicas: z.number().int().positive() }).optional(),
    secrets: z.array(z.string()).optional(),
    // Numeric only: the owner of a key file in a volume is a number, and so must its reader be.
    user: z.string().regex(/^\d+:\d+$/, 'UID:GID').optional(),
  })
  .refine((s) => s.image !== undefined || s.build !== undefined, 'a service needs an image or a build');

const composeFile = z.strictObject({
  services: z.record(z.string(), service),
  volumes: z.record(z.string(), z.null()).optional(),
  // From a file of the host only: a secret's value never sits in this file or its environment.
  secrets: z.record(z.string(), z.strictObject({ file: z.string() })).optional(),
});

type ComposeFile = z.infer<typeof composeFile>;
type Service = z.infer<typeof service>;

const dynamicConfig = z.record(
  z.string(),
  z.array(z.strictObject({ value: z.unknown(), constraints: z.record(z.string(), z.unknown()).optional() })).min(1),
);

function words(cmd: Service['command']): string {
  return cmd === undefined ? '' : typeof cmd === 'string' ? cmd : cmd.join(' ');
}

/** `temporal:7233` → the service it names must exist and publish that port inside the network. */
function addressProblems(compose: ComposeFile, where: string, address: string | undefined): string[] {
  if (address === undefined || address === '') return [`${where}: TEMPORAL_ADDRESS is required`];
  const [host, port] = address.split(':');
  if (host === undefined || compose.services[host] === undefined) {
    return [`${where}: TEMPORAL_ADDRESS ${address} names no service of this file`];
  }
  return port === '7233' ? [] : [`${where}: TEMPORAL_ADDRESS ${address} is not the frontend port 7233`];
}

/** Attributes as `Name=Type` pairs → a map. */
function attributeMap(list: string | undefined): Record<string, string> {
  return Object.fromEntries((list ?? '').split(/\s+/).filter(Boolean).map((pair) => pair.split('=', 2) as [string, string]));
}

/** The release scripts/deploy-local.sh builds: the compose images must be that release too. */
const deployedRelease = /^version=(\S+)$/m.exec(read('scripts/deploy-local.sh'))?.[1] ?? '(none)';

/** `SOURCE:TARGET[:ro]` of a service whose target is `target`, or undefined. */
function mountOf(svc: Service, target: string): string | undefined {
  return (svc.volumes ?? []).find((v) => v.split(':')[1] === target);
}

/**
 * The metrics: workers serve them where Prometheus's config scrapes them (every replica, by the
 * service's name), and Grafana shows the repository's dashboard through that Prometheus.
 */
function metricsProblems(compose: ComposeFile, worker: Service, fileExists: (path: string) => boolean): string[] {
  const problems: string[] = [];
  const port = /^[^:]+:(\d+)$/.exec(worker.environment?.TROUPE_METRICS_ADDRESS ?? '')?.[1];
  if (port === undefined) problems.push('worker.environment: TROUPE_METRICS_ADDRESS must be HOST:PORT, for Prometheus to scrape');
  const { prometheus, grafana } = compose.services;
  if (prometheus === undefined) return [...problems, 'services: no "prometheus" service'];
  const config = mountOf(prometheus, '/etc/prometheus/prometheus.yml')?.split(':')[0];
  if (config === undefined || !fileExists(config)) return [...problems, 'prometheus.volumes: must mount a scrape config of this repository'];
  const scrape = parse(read(config)) as { scrape_configs?: Array<{ dns_sd_configs?: Array<{ names?: string[]; port?: number }> }> };
  const targets = (scrape.scrape_configs ?? []).flatMap((c) => c.dns_sd_configs ?? []);
  if (!targets.some((t) => (t.names ?? []).includes('worker') && String(t.port) === port)) {
    problems.push(`prometheus: ${config} must scrape every "worker" replica on the metrics port ${port ?? '(unset)'}`);
  }
  if (grafana === undefined) return [...problems, 'services: no "grafana" service'];
  const dashboard = (grafana.volumes ?? []).find((v) => v.split(':')[1]?.startsWith('/var/lib/grafana/dashboards/'))?.split(':')[0];
  if (dashboard === undefined || !fileExists(dashboard)) problems.push('grafana.volumes: must mount the dashboard of this repository under /var/lib/grafana/dashboards');
  if (grafana.depends_on?.prometheus === undefined) problems.push('grafana.depends_on: must start after prometheus');
  return problems;
}

/** The values `flag` is given in an argv-style command (`--flag VALUE`, repeatable). */
function flagValues(cmd: Service['command'], flag: string): string[] {
  const argv = typeof cmd === 'string' ? cmd.split(/\s+/) : (cmd ?? []);
  return argv.flatMap((word, i) => (word === flag && argv[i + 1] !== undefined ? [argv[i + 1] as string] : []));
}

/** `/run/secrets/NAME` → NAME when the service mounts that secret, else undefined. */
function mountedSecret(svc: Service, path: string | undefined): string | undefined {
  const name = /^\/run\/secrets\/([^/]+)$/.exec(path ?? '')?.[1];
  return name !== undefined && (svc.secrets ?? []).includes(name) ? name : undefined;
}

/** `HOST:PORT` → PORT when HOST is every interface (the container's network), else undefined. */
const portOnAll = (address: string | undefined) => /^0\.0\.0\.0:(\d+)$/.exec(address ?? '')?.[1];

/**
 * The service gateways: two or more, each from the workers' image, keeping its tables on a volume of
 * its own, its admin token from a compose secret, its data plane published, healthy only when its
 * admin API answers with the token; every worker pushes to each of them with that token, and
 * Prometheus scrapes each one's admin /metrics with it.
 */
function gatewayProblems(compose: ComposeFile, worker: Service, readText: (path: string) => string): string[] {
  const problems: string[] = [];
  const gateways = Object.entries(compose.services).filter(([, svc]) => /(^| )node bin\/troupe\.js gateway /.test(words(svc.command)));
  if (gateways.length < 2) problems.push(`services: at least 2 gateways (node bin/troupe.js gateway), so one can go down while the other serves; found ${gateways.length}`);
  const workerSecret = mountedSecret(worker, flagValues(worker.command, '--gateway-token-file')[0]);
  if (workerSecret === undefined) problems.push('worker.command: --gateway-token-file must name a secret the worker mounts (/run/secrets/NAME)');
  const pushedTo = new Set(flagValues(worker.command, '--gateway'));
  const stateVolumes = new Map<string, string>();
  const admins: string[] = [];
  for (const [name, gw] of gateways) {
    if (gw.image !== worker.image) problems.push(`${name}.image: must be the workers' image ${worker.image ?? '(none)'}`);
    const listen = portOnAll(flagValues(gw.command, '--listen')[0]);
    const admin = portOnAll(flagValues(gw.command, '--admin')[0]);
    if (listen === undefined || admin === undefined) {
      problems.push(`${name}.command: --listen and --admin must be 0.0.0.0:PORT, reachable on the compose network`);
      continue;
    }
    admins.push(`${name}:${admin}`);
    if (!(gw.ports ?? []).some((p) => p.endsWith(`:${listen}`))) problems.push(`${name}.ports: must publish the data plane's port ${listen}`);
    if ((gw.ports ?? []).some((p) => p.endsWith(`:${admin}`))) problems.push(`${name}.ports: the admin API (${admin}) stays on the compose network`);
    const secret = mountedSecret(gw, flagValues(gw.command, '--admin-token-file')[0]);
    if (secret === undefined) problems.push(`${name}.command: --admin-token-file must name a secret it mounts (/run/secrets/NAME)`);
    else if (workerSecret !== undefined && secret !== workerSecret) problems.push(`${name}: its token secret "${secret}" is not the workers' "${workerSecret}"`);
    const test = (gw.healthcheck?.test ?? []).join(' ');
    if (secret === undefined || !test.includes(`/run/secrets/${secret}`) || !test.includes(`:${admin}/info`)) {
      problems.push(`${name}.healthcheck: must ask its admin API (GET :${admin}/info) with the token`);
    }
    const state = flagValues(gw.command, '--state')[0] ?? '';
    const volume = (gw.volumes ?? []).find((v) => {
      const [source = '', target = ''] = v.split(':');
      return state.startsWith(`${target}/`) && !source.startsWith('.') && !source.startsWith('/') && v.includes(':') && !v.endsWith(':ro');
    });
    if (volume === undefined) {
      problems.push(`${name}.volumes: --state ${state || '(unset)'} must be on a writable named volume, so its tables outlive the container`);
    } else {
      const source = volume.split(':')[0] ?? '';
      const other = stateVolumes.get(source);
      if (other !== undefined) problems.push(`${name}.volumes: "${source}" is ${other}'s state too; each gateway needs its own volume`);
      stateVolumes.set(source, name);
    }
    if (!pushedTo.has(`http://${name}:${admin}`)) problems.push(`worker.command: must push to ${name} (--gateway http://${name}:${admin})`);
  }

  const { prometheus } = compose.services;
  const config = prometheus === undefined ? undefined : mountOf(prometheus, '/etc/prometheus/prometheus.yml')?.split(':')[0];
  if (prometheus === undefined || config === undefined) return problems;
  type Job = { static_configs?: Array<{ targets?: string[] }>; authorization?: { credentials_file?: string } };
  const jobs = ((parse(readText(config)) as { scrape_configs?: Job[] }).scrape_configs ?? []);
  for (const target of admins) {
    const job = jobs.find((j) => (j.static_configs ?? []).some((c) => (c.targets ?? []).includes(target)));
    if (job === undefined) {
      problems.push(`prometheus: ${config} must scrape the gateway ${target}`);
    } else if (mountedSecret(prometheus, job.authorization?.credentials_file) !== workerSecret) {
      problems.push(`prometheus: the job scraping ${target} must send the gateways' token (authorization.credentials_file: /run/secrets/${workerSecret ?? 'NAME'}, mounted in prometheus.secrets)`);
    }
  }
  return problems;
}

/** Troupe's server: the release deploy-local.sh runs, with Troupe's claim mapper and authorizer. */
const serverBuild = './deploy/temporal-server';
const serverBinary = 'troupe-temporal-server';

/**
 * The server is Troupe's build (deploy/temporal-server), never the release's image, which lets any
 * certificate of the CA do anything; and the frontend runs with what its authorizer relies on: client
 * certificates required (the claim mapper reads the role from the CN) and its refusals' reasons passed on.
 */
function serverProblems(compose: ComposeFile, temporal: Service, fileExists: (path: string) => boolean, readText: (path: string) => string): string[] {
  const problems: string[] = [];
  if (/^temporalio\/server:/.test(temporal.image ?? '')) {
    problems.push(`temporal.image: the release's server image has no Troupe authorizer (any certificate of the CA may do anything); build ${serverBuild}`);
  }
  if (temporal.build !== serverBuild) {
    problems.push(`temporal.build: must be ${serverBuild}, the server with Troupe's claim mapper and authorizer`);
  } else {
    problems.push(...serverSourceProblems(readText));
  }
  if (temporal.image !== `${serverBinary}:${deployedRelease}`) {
    problems.push(`temporal.image: must be ${serverBinary}:${deployedRelease}, the release scripts/deploy-local.sh runs`);
  }
  const start = words(temporal.entrypoint);
  const env = /--env (\S+)/.exec(start)?.[1];
  if (/--allow-no-auth\b/.test(start)) problems.push('temporal.entrypoint: --allow-no-auth starts a frontend without an authorizer');
  if (!new RegExp(`^${serverBinary} --root /etc/temporal --config config --env \\S+ start$`).test(start) || env === undefined) {
    problems.push(`temporal.entrypoint: must start ${serverBinary} (the image's binary, Troupe's authorizer) from /etc/temporal/config with --env NAME`);
  } else {
    const mount = mountOf(temporal, `/etc/temporal/config/${env}.yaml`);
    if (mount?.split(':')[0] !== './deploy/temporal/config/troupe.yaml') {
      problems.push(`temporal.volumes: /etc/temporal/config/${env}.yaml must be ./deploy/temporal/config/troupe.yaml, the bare deployment's config`);
    }
  }
  const serverEnv = temporal.environment ?? {};
  const database = serverEnv.TROUPE_POSTGRES_HOST ?? '';
  if (!/^postgres:/.test(compose.services[database]?.image ?? '')) {
    problems.push(`temporal.environment: TROUPE_POSTGRES_HOST "${database}" is not a PostgreSQL service of this file`);
  }
  const dynamic = mountOf(temporal, serverEnv.TROUPE_TEMPORAL_DYNAMIC_CONFIG ?? '');
  if (dynamic?.split(':')[0] !== './deploy/temporal/dynamicconfig.yaml') {
    problems.push(`temporal.volumes: TROUPE_TEMPORAL_DYNAMIC_CONFIG ${serverEnv.TROUPE_TEMPORAL_DYNAMIC_CONFIG ?? '(unset)'} is not mounted from deploy/temporal/dynamicconfig.yaml`);
  } else {
    const settings = parse(readText('./deploy/temporal/dynamicconfig.yaml')) as Record<string, Array<{ value?: unknown }> | undefined>;
    if (settings['frontend.exposeAuthorizerErrors']?.[0]?.value !== true) {
      problems.push('deploy/temporal/dynamicconfig.yaml: frontend.exposeAuthorizerErrors must be true, so a refused client reads the authorizer\'s reason');
    }
  }
  // The claim mapper takes the role from the client certificate: a frontend that does not require one
  // would admit clients with no role to health checks only, or with a role it cannot check.
  const frontendTls = /^ {4}frontend:\n {6}server:\n((?: {8}.*\n)+)/m.exec(readText('./deploy/temporal/config/troupe.yaml'))?.[1] ?? '';
  if (!/^ {8}requireClientAuth: true$/m.test(frontendTls)) {
    problems.push('deploy/temporal/config/troupe.yaml: global.tls.frontend.server must set requireClientAuth: true (the authorizer\'s roles come from client certificates)');
  }
  if (temporal.depends_on?.['temporal-schema']?.condition !== 'service_completed_successfully') {
    problems.push('temporal.depends_on: must wait for temporal-schema to complete successfully');
  }
  const schema = compose.services['temporal-schema'];
  if (schema === undefined) return [...problems, 'services: no "temporal-schema" service'];
  if (schema.image !== `temporalio/admin-tools:${deployedRelease}-tctl-1.18.4-cli-1.5.0`) {
    problems.push(`temporal-schema.image: must be the admin-tools image of release ${deployedRelease}`);
  }
  const script = mountOf(schema, words(schema.entrypoint).split(' ').pop() ?? '');
  if (script?.split(':')[0] !== './deploy/temporal/schema.sh' || !fileExists('./deploy/temporal/schema.sh')) {
    problems.push('temporal-schema.entrypoint: must run ./deploy/temporal/schema.sh, the script the bare deployment runs');
  }
  if ((schema.environment ?? {}).SQL_HOST !== database) {
    problems.push(`temporal-schema.environment: SQL_HOST must be the server's database "${database}"`);
  }
  if (schema.depends_on?.[database]?.condition !== 'service_healthy') {
    problems.push('temporal-schema.depends_on: must wait for PostgreSQL to be healthy');
  }
  return problems;
}

/** deploy/temporal-server: a main that installs the authorizer, the release go.mod pins, and an image built from both. */
function serverSourceProblems(readText: (path: string) => string): string[] {
  const problems: string[] = [];
  const main = readText(`${serverBuild}/main.go`);
  if (!/temporal\.WithAuthorizer\(troupeAuthorizer\{\}\)/.test(main) || !/temporal\.WithClaimMapper\(/.test(main)) {
    problems.push(`${serverBuild}/main.go: the server must be made with temporal.WithAuthorizer(troupeAuthorizer{}) and temporal.WithClaimMapper`);
  }
  const goMod = readText(`${serverBuild}/go.mod`);
  if (!new RegExp(`^\\s+go\\.temporal\\.io/server v${deployedRelease.replaceAll('.', '\\.')}$`, 'm').test(goMod)) {
    problems.push(`${serverBuild}/go.mod: must require go.temporal.io/server v${deployedRelease}, the release scripts/deploy-local.sh runs`);
  }
  problems.push(...serverDockerfileProblems(readText(`${serverBuild}/Dockerfile`), goMod));
  return problems;
}

/**
 * deploy/temporal-server/Dockerfile: built in a pinned Go toolchain image at least as new as go.mod
 * asks, statically (it runs on a small base without the toolchain's libc), and run from a pinned
 * small base as a non-root user, with the temporal CLI for the healthcheck.
 */
function serverDockerfileProblems(text: string, goMod: string): string[] {
  const where = `${serverBuild}/Dockerfile`;
  const problems: string[] = [];
  const steps = dockerInstructions(text);
  const froms = steps.filter((s) => s.keyword === 'FROM').map((s) => s.args);
  const build = /^golang:(\d+)\.(\d+)\.\d+-[a-z0-9.]+ AS (\S+)$/i.exec(froms[0] ?? '');
  const wanted = /^go (\d+)\.(\d+)/m.exec(goMod);
  if (build === null || froms.length < 2) {
    return [`${where}: must build in a pinned Go toolchain image (FROM golang:X.Y.Z-… AS NAME) and run from another (multi-stage)`];
  }
  if (wanted !== null && Number(build[1]) * 1000 + Number(build[2]) < Number(wanted[1]) * 1000 + Number(wanted[2])) {
    problems.push(`${where}: FROM ${froms[0]}: go.mod asks for go ${wanted[1]}.${wanted[2]}`);
  }
  const runtime = froms.at(-1) ?? '';
  if (/^golang:/.test(runtime) || !pinnedImage.safeParse(runtime).success) {
    problems.push(`${where}: FROM ${runtime}: run on a small base pinned to a release tag (name:X.Y…), not the toolchain's image`);
  }
  const runs = steps.filter((s) => s.keyword === 'RUN').map((s) => s.args);
  if (!runs.some((r) => /\bCGO_ENABLED=0 go build\b.*-o \S*\/troupe-temporal-server\b/.test(r))) {
    problems.push(`${where}: RUN: must build ${serverBinary} with CGO_ENABLED=0 go build -o …/${serverBinary} (static, for the small base)`);
  }
  const copies = steps.filter((s) => s.keyword === 'COPY').map((s) => s.args);
  if (!copies.some((c) => c.startsWith(`--from=${build[3]} `) && c.endsWith(`/usr/local/bin/${serverBinary}`))) {
    problems.push(`${where}: COPY --from=${build[3]}: the runtime image must take ${serverBinary} from the build stage into /usr/local/bin`);
  }
  if (!copies.some((c) => /^--from=temporalio\/admin-tools:\S+ \/usr\/local\/bin\/temporal \/usr\/local\/bin\/temporal$/.test(c))) {
    problems.push(`${where}: COPY: the healthcheck's temporal CLI comes from the pinned admin-tools image`);
  }
  const user = steps.filter((s) => s.keyword === 'USER').at(-1)?.args;
  if (user === undefined || /^(root|0)(:|$)/.test(user)) problems.push(`${where}: USER: the server must run as a non-root user (${user ?? 'none'})`);
  const entry = steps.filter((s) => s.keyword === 'ENTRYPOINT').at(-1)?.args ?? '';
  if (!entry.startsWith(`["${serverBinary}"`)) problems.push(`${where}: ENTRYPOINT ${entry || '(none)'}: must run ${serverBinary}`);
  return problems;
}

/** Everything wrong with a compose document, as `where: what` lines; empty when it is Troupe's stack. */
function composeProblems(doc: unknown, fileExists: (path: string) => boolean, readText: (path: string) => string = read): string[] {
  const parsed = composeFile.safeParse(doc);
  if (!parsed.success) return parsed.error.issues.map((i) => `${i.path.join('.') || '(root)'}: ${i.message}`);
  const compose = parsed.data;
  const problems: string[] = [];
  const declared = new Set(Object.keys(compose.volumes ?? {}));
  const used = new Set<string>();
  const usedSecrets = new Set<string>();

  for (const [name, svc] of Object.entries(compose.services)) {
    for (const [target, dep] of Object.entries(svc.depends_on ?? {})) {
      const other = compose.services[target];
      if (other === undefined) {
        problems.push(`${name}.depends_on: no service "${target}"`);
      } else if (dep.condition === 'service_healthy' && other.healthcheck === undefined) {
        problems.push(`${name}.depends_on: waits for "${target}" to be healthy, but it has no healthcheck`);
      } else if (dep.condition === 'service_completed_successfully' && !['on-failure', 'no'].includes(other.restart)) {
        problems.push(`${name}.depends_on: waits for "${target}" to complete, but its restart policy never lets it end`);
      }
    }
    for (const volume of svc.volumes ?? []) {
      if (!volume.includes(':')) continue; // anonymous: one per container, nothing to declare
      const source = volume.split(':')[0] ?? '';
      if (source.startsWith('.') || source.startsWith('/')) {
        if (!fileExists(source)) problems.push(`${name}.volumes: ${source} does not exist in the repository`);
      } else {
        used.add(source);
        if (!declared.has(source)) problems.push(`${name}.volumes: named volume "${source}" is not declared under volumes`);
      }
    }
    if (['always', 'unless-stopped'].includes(svc.restart) && svc.healthcheck === undefined) {
      problems.push(`${name}: a long-running service needs a healthcheck`);
    }
    for (const secret of svc.secrets ?? []) {
      usedSecrets.add(secret);
      if (compose.secrets?.[secret] === undefined) problems.push(`${name}.secrets: "${secret}" is not declared under secrets`);
    }
    for (const [key, value] of Object.entries(svc.environment ?? {})) {
      // A path to a file of one of its mounts (TEMPORAL_TLS_KEY: /etc/troupe/tls/client.key) names a secret, it is not one.
      const mountedFile = (svc.volumes ?? []).some((v) => value.startsWith(`${v.split(':')[1] ?? '//'}/`));
      if (/(TOKEN|KEY)$/.test(key) && !mountedFile) problems.push(`${name}.environment: ${key} puts a secret in this file; mount it as a secret (or name its _FILE)`);
    }
  }
  for (const volume of declared) {
    if (!used.has(volume)) problems.push(`volumes: "${volume}" is declared but no service uses it`);
  }
  for (const [secret, { file }] of Object.entries(compose.secrets ?? {})) {
    if (!usedSecrets.has(secret)) problems.push(`secrets: "${secret}" is declared but no service uses it`);
    // `${VAR:-default}` or a path: the default must be a file git ignores, so no token is ever committed.
    const path = /^\$\{[A-Z0-9_]+:-(.+)\}$/.exec(file)?.[1] ?? file;
    const top = path.replace(/^\.\//, '').split('/')[0] ?? '';
    if (!gitIgnored.has(`${top}/`) && !gitIgnored.has(top)) problems.push(`secrets: "${secret}" is read from ${path}, which git does not ignore`);
  }

  const { worker, temporal } = compose.services;
  const setup = compose.services['temporal-setup'];
  if (worker === undefined) return [...problems, 'services: no "worker" service'];
  if (temporal === undefined) return [...problems, 'services: no "temporal" service'];
  if (setup === undefined) return [...problems, 'services: no "temporal-setup" service'];

  // The workers: built from this repository, enough of them, told where Temporal is.
  const env = worker.environment ?? {};
  if (worker.build !== '.') problems.push('worker: must be built from this repository (build: .)');
  if (!/(^| )node bin\/troupe\.js worker --backend ssh( --(?!backend)[a-z-]+ \S+)*$/.test(words(worker.command))) {
    // Unprivileged in a container, the local fleet cannot isolate jobs from the worker's keys.
    problems.push('worker.command: must run `node bin/troupe.js worker --backend ssh` (SSH fleets only)');
  }
  problems.push(...addressProblems(compose, 'worker.environment', env.TEMPORAL_ADDRESS));
  for (const key of ['TEMPORAL_NAMESPACE', 'TROUPE_TASK_QUEUE', 'TROUPE_STATE_DIR']) {
    if (!env[key]) problems.push(`worker.environment: ${key} is required`);
  }
  if ((worker.deploy?.replicas ?? 1) < 2) problems.push('worker.deploy.replicas: at least 2, so a run survives a worker');
  const stateDir = env.TROUPE_STATE_DIR ?? '';
  const stateVolume = (worker.volumes ?? []).find((v) => v === stateDir || v.split(':')[1] === stateDir);
  if (stateDir === '' || stateVolume === undefined || stateVolume.startsWith('.') || stateVolume.endsWith(':ro')) {
    problems.push(`worker.volumes: a writable volume must hold the state dir TROUPE_STATE_DIR (${stateDir || 'unset'})`);
  }
  if (worker.depends_on?.['temporal-setup']?.condition !== 'service_completed_successfully') {
    problems.push('worker.depends_on: must wait for temporal-setup to complete successfully');
  }
  const healthScript = (worker.healthcheck?.test ?? []).find((word) => word.endsWith('.ts'));
  if (healthScript === undefined || !fileExists(healthScript)) {
    problems.push(`worker.healthcheck: runs no script of this repository (${healthScript ?? 'none'})`);
  }

  // The set-up: same namespace as the workers, the dev server's search attributes, after the server.
  const setupEnv = setup.environment ?? {};
  problems.push(...addressProblems(compose, 'temporal-setup.environment', setupEnv.TEMPORAL_ADDRESS));
  if (setupEnv.TEMPORAL_NAMESPACE !== env.TEMPORAL_NAMESPACE) {
    problems.push(`temporal-setup.environment: TEMPORAL_NAMESPACE ${setupEnv.TEMPORAL_NAMESPACE} is not the workers' ${env.TEMPORAL_NAMESPACE}`);
  }
  const attributes = attributeMap(setupEnv.TROUPE_SEARCH_ATTRIBUTES);
  for (const [attr, type] of Object.entries(searchAttributes)) {
    if (attributes[attr] !== type) problems.push(`temporal-setup.environment: TROUPE_SEARCH_ATTRIBUTES must register ${attr}=${type}`);
  }
  for (const attr of Object.keys(attributes)) {
    if (!(attr in searchAttributes)) problems.push(`temporal-setup.environment: ${attr} is not in the dev server's searchAttributes`);
  }
  if (setup.depends_on?.temporal?.condition !== 'service_healthy') {
    problems.push('temporal-setup.depends_on: must wait for temporal to be healthy');
  }
  if (!/^temporalio\/admin-tools:/.test(setup.image ?? '')) problems.push('temporal-setup.image: the temporal CLI comes from temporalio/admin-tools');

  // The server: the release deploy-local.sh runs, from the same config file and dynamic config, on
  // a PostgreSQL service of this file whose schema temporal-schema applied first.
  problems.push(...serverProblems(compose, temporal, fileExists, readText));
  problems.push(...metricsProblems(compose, worker, fileExists));
  problems.push(...gatewayProblems(compose, worker, readText));
  problems.push(...tlsProblems(compose, fileExists));
  problems.push(...codecProblems(compose));
  return problems;
}

/** The CLI's and Troupe's TLS variables, and the Web UI server's own names for the same files. */
/**
 * The codec server decrypts for whoever it admits: the Web UI reaches it with the browser's session
 * cookie (its fetches include credentials), never by its Origin alone, which a local process forges.
 */
function codecProblems(compose: ComposeFile): string[] {
  const problems: string[] = [];
  const ui = compose.services['temporal-ui'];
  const codec = compose.services['codec-server'];
  if (ui?.environment?.TEMPORAL_CODEC_ENDPOINT && String(ui.environment.TEMPORAL_CODEC_INCLUDE_CREDENTIALS) !== 'true') {
    problems.push('temporal-ui.environment: TEMPORAL_CODEC_INCLUDE_CREDENTIALS must be "true", so the browser sends the codec server its session cookie');
  }
  if (codec && /--trust-origin/.test(words(codec.command))) {
    problems.push('codec-server.command: --trust-origin admits any local process that forges the Web UI\'s Origin; the UI signs in instead');
  }
  return problems;
}

const clientTlsVariables = {
  cli: { ca: 'TEMPORAL_TLS_SERVER_CA_CERT_PATH', cert: 'TEMPORAL_TLS_CLIENT_CERT_PATH', key: 'TEMPORAL_TLS_CLIENT_KEY_PATH', name: 'TEMPORAL_TLS_SERVER_NAME' },
  ui: { ca: 'TEMPORAL_TLS_CA', cert: 'TEMPORAL_TLS_CERT', key: 'TEMPORAL_TLS_KEY', name: 'TEMPORAL_TLS_SERVER_NAME' },
} as const;

/**
 * The frontend's mTLS: temporal-certs makes the certificates into a volume with deploy/make-certs.sh
 * (the script deploy-local.sh runs); the server and every service whose TEMPORAL_ADDRESS names it
 * waits for that, mounts the volume read-only, and is given the CA, its certificate, its key (as the
 * user who owns it there) and a name the server's certificate has.
 */
function tlsProblems(compose: ComposeFile, fileExists: (path: string) => boolean): string[] {
  const certs = compose.services['temporal-certs'];
  if (certs === undefined) return ['services: no "temporal-certs" service: the frontend\'s certificates are made by one'];
  const problems: string[] = [];
  const script = mountOf(certs, '/etc/troupe/make-certs.sh')?.split(':')[0];
  const run = /(?:^| )sh \/etc\/troupe\/make-certs\.sh (\/\S+)((?: (?:DNS|IP):\S+)*)/.exec(words(certs.entrypoint));
  if (script !== './deploy/make-certs.sh' || !fileExists(script) || run === null) {
    return ['temporal-certs: must run ./deploy/make-certs.sh (mounted at /etc/troupe/make-certs.sh), the script deploy-local.sh runs'];
  }
  const dir = run[1] ?? '';
  const names = ['localhost', '127.0.0.1', ...(run[2] ?? '').trim().split(' ').filter(Boolean).map((n) => n.slice(n.indexOf(':') + 1))];
  const volume = (certs.volumes ?? []).find((v) => v.split(':')[1] === dir && !v.endsWith(':ro'))?.split(':')[0];
  if (volume === undefined || volume.startsWith('.') || volume.startsWith('/')) {
    return [`temporal-certs.volumes: ${dir} must be a writable named volume`];
  }
  // `chown U:G DIR/FILE` in place, or `install -m 600 -o U -g G DIR/CERT.key DIR/FILE`: a copy of that certificate's key.
  const ownerOf = (file: string, cert: string) => {
    const made = words(certs.entrypoint).replace(/\s+/g, ' ');
    const chowned = new RegExp(`chown (\\d+:\\d+) ${dir}/${file}(?: |$)`).exec(made)?.[1];
    const copied = new RegExp(`install -m 600 -o (\\d+) -g (\\d+) ${dir}/${cert}\\.key ${dir}/${file}(?: |$)`).exec(made);
    return chowned ?? (copied === null ? undefined : `${copied[1]}:${copied[2]}`);
  };
  const server = Object.entries(compose.services).find(([, svc]) => svc.build === serverBuild)?.[0] ?? 'temporal';
  if (!names.includes(server)) problems.push(`temporal-certs: the server's certificate must name DNS:${server}, its service name`);
  const reachers = Object.entries(compose.services).filter(([name, svc]) => name === server || svc.environment?.TEMPORAL_ADDRESS?.split(':')[0] === server);
  for (const [name, svc] of reachers) {
    const env = svc.environment ?? {};
    if (svc.depends_on?.['temporal-certs']?.condition !== 'service_completed_successfully') {
      problems.push(`${name}.depends_on: must wait for temporal-certs to complete successfully (it reaches the frontend)`);
    }
    if (!(svc.volumes ?? []).includes(`${volume}:${dir}:ro`)) problems.push(`${name}.volumes: must mount ${volume}:${dir}:ro (it reaches the frontend)`);
    const keyOwner = (file: string, cert: string) => {
      const owner = ownerOf(file, cert);
      if (owner === undefined) problems.push(`temporal-certs: must chown ${dir}/${file} (or install a 0600 copy of ${cert}.key there) to the one user that reads it`);
      else if (svc.user !== owner) {
        problems.push(`${name}.user: must be ${owner}, the owner of ${dir}/${file} (keys are 0600)`);
      }
    };
    if (name === server) {
      if (env.TROUPE_TEMPORAL_TLS_DIR !== dir) problems.push(`${name}.environment: TROUPE_TEMPORAL_TLS_DIR must be ${dir}, for the config's mTLS`);
      if (env.TROUPE_TEMPORAL_TOKEN_KEY !== `${dir}/token.pub`) problems.push(`${name}.environment: TROUPE_TEMPORAL_TOKEN_KEY must be ${dir}/token.pub (make-certs.sh makes it), so users' tokens are checked`);
      const test = svc.healthcheck?.test ?? [];
      const flag = (f: string) => test[test.indexOf(f) + 1];
      if (flag('--tls-ca-path') !== `${dir}/ca.pem` || !flag('--tls-cert-path')?.startsWith(`${dir}/`) || !flag('--tls-key-path')?.startsWith(`${dir}/`) || !names.includes(flag('--tls-server-name') ?? '')) {
        problems.push(`${name}.healthcheck: must ask with --tls-ca-path ${dir}/ca.pem, --tls-cert-path, --tls-key-path and a --tls-server-name the certificate has`);
      } else {
        keyOwner(flag('--tls-key-path')?.slice(dir.length + 1) ?? '', 'server');
      }
      continue;
    }
    const vars = /^temporalio\/ui:/.test(svc.image ?? '') ? clientTlsVariables.ui : clientTlsVariables.cli;
    const { cert, why } = clientRole(svc);
    const key = new RegExp(`^${dir}/(${cert}(?:-[a-z]+)?\\.key)$`).exec(env[vars.key] ?? '')?.[1];
    if (env[vars.ca] !== `${dir}/ca.pem` || env[vars.cert] !== `${dir}/${cert}.pem` || key === undefined) {
      problems.push(`${name}.environment: ${vars.ca}, ${vars.cert} and ${vars.key} must be ${dir}/ca.pem, ${cert}.pem and ${cert}.key or a copy of it (mTLS to the frontend; ${why})`);
    } else {
      keyOwner(key, cert);
    }
    if (!names.includes(env[vars.name] ?? '')) problems.push(`${name}.environment: ${vars.name} must be a name of the server's certificate (${names.join(', ')})`);
  }
  return problems;
}

/**
 * The certificate a client of the frontend shows is its role there (deploy/temporal-server/roles.go,
 * deploy/make-certs.sh): workers the worker's; the namespace's set-up the services' (creating a
 * namespace and search attributes is an operator's call); every other client, the Web UI among them,
 * a user's, so that reaching it never grants what only workers may do.
 */
function clientRole(svc: Service): { cert: 'worker' | 'server' | 'user'; why: string } {
  if (/(^| )node bin\/troupe\.js worker( |$)/.test(words(svc.command))) return { cert: 'worker', why: 'a worker shows CN troupe-worker' };
  if (/\/temporal-setup\.sh$/.test(words(svc.entrypoint))) return { cert: 'server', why: 'creating the namespace is an operator\'s call: CN troupe-server' };
  return { cert: 'user', why: 'any other client is a user, CN troupe-user: it must not act as a worker' };
}

/** Whether scripts/deploy-local.sh makes its certificates with deploy/make-certs.sh, not openssl commands of its own. */
function deployLocalCertProblems(script: string): string[] {
  const problems: string[] = [];
  if (!/^\s+sh "\$repo\/deploy\/make-certs\.sh" "\$tls"/m.test(script)) problems.push('scripts/deploy-local.sh: must make its certificates with sh "$repo/deploy/make-certs.sh" "$tls"');
  if (/^\s*(?!#).*\bopenssl (genpkey|req|x509)\b/m.test(script)) problems.push('scripts/deploy-local.sh: runs openssl itself; the certificates are deploy/make-certs.sh\'s');
  return problems;
}

// ---- Dockerfile ---------------------------------------------------------------------------------

interface Instruction {
  keyword: string;
  args: string;
}

/** Instructions with continuation lines joined and comments dropped. */
function dockerInstructions(text: string): Instruction[] {
  const logical = text
    .split('\n')
    .filter((line) => !/^\s*#/.test(line))
    .join('\n')
    .replace(/\\\n/g, ' ');
  return logical
    .split('\n')
    .map((line) => line.trim())
    .filter(Boolean)
    .map((line) => {
      const [keyword = '', ...rest] = line.split(/\s+/);
      return { keyword: keyword.toUpperCase(), args: rest.join(' ') };
    });
}

function dockerfileProblems(text: string, dockerignore: string, fileExists: (path: string) => boolean): string[] {
  const problems: string[] = [];
  const steps = dockerInstructions(text);
  const of = (keyword: string) => steps.filter((s) => s.keyword === keyword);

  const base = of('FROM')[0]?.args ?? '';
  if (!/^node:20\.\d+\.\d+-bookworm-slim$/.test(base)) {
    problems.push(`FROM ${base}: pin the base image to an exact Node 20 release (node:20.X.Y-bookworm-slim)`);
  }
  const runs = of('RUN').map((s) => s.args);
  if (!runs.some((r) => /\bnpm ci\b/.test(r) && /--omit=dev\b/.test(r))) {
    problems.push('RUN: dependencies must come from the lock file with `npm ci --omit=dev`');
  }
  for (const pkg of ['openssh-client', 'iproute2']) {
    if (!runs.some((r) => /apt-get install/.test(r) && new RegExp(`\\b${pkg}\\b`).test(r))) {
      problems.push(`RUN: apt-get install must include ${pkg}`);
    }
  }
  const user = of('USER').at(-1)?.args;
  if (user === undefined || /^(root|0)(:|$)/.test(user)) problems.push(`USER: the image must run as a non-root user (${user ?? 'none'})`);
  const users = steps.findIndex((s) => s.keyword === 'USER');
  const lastRun = steps.map((s) => s.keyword).lastIndexOf('RUN');
  if (users !== -1 && lastRun > users) problems.push('USER: set it after the last RUN, so nothing of the image runs as root by mistake');

  const copied = of('COPY').flatMap((s) => s.args.split(/\s+/).filter((w) => !w.startsWith('--')).slice(0, -1));
  for (const needed of ['package.json', 'package-lock.json', 'tsconfig.json', 'src/', 'workflows/', 'activities/', 'bin/']) {
    if (!copied.includes(needed)) problems.push(`COPY: the image needs ${needed}`);
  }
  const ignored = new Set(dockerignore.split('\n').map((l) => l.trim()).filter((l) => l && !l.startsWith('#')));
  for (const path of copied) {
    if (!fileExists(path)) problems.push(`COPY: ${path} does not exist in the repository`);
    if (ignored.has(path.replace(/\/$/, ''))) problems.push(`COPY: ${path} is excluded by .dockerignore`);
  }
  for (const excluded of ['node_modules', '.venv', '.troupe', 'artifacts', '.git']) {
    if (!ignored.has(excluded)) problems.push(`.dockerignore: must exclude ${excluded}`);
  }
  const cmd = of('CMD').at(-1)?.args ?? '';
  if (!/^\["node",\s*"bin\/troupe\.js",\s*"worker"\]$/.test(cmd)) problems.push(`CMD ${cmd}: must be ["node", "bin/troupe.js", "worker"]`);
  return problems;
}

// ---- the checks ---------------------------------------------------------------------------------

const inRepo = (path: string) => existsSync(join(projectRoot, path));
const composeDoc = (): Record<string, unknown> => parse(read('docker-compose.yml')) as Record<string, unknown>;

type Doc = { services: Record<string, Record<string, unknown>>; volumes?: Record<string, unknown>; secrets?: Record<string, unknown> };

/** A deep copy of docker-compose.yml with one edit applied; `readText` stands in for the files it mounts. */
function brokenCompose(edit: (doc: Doc) => void, readText?: (path: string) => string) {
  const doc = structuredClone(composeDoc()) as Doc;
  edit(doc);
  return composeProblems(doc, inRepo, readText);
}

/** The repository's Prometheus config with one edit applied, as a mounted file would read. */
function brokenPrometheus(edit: (text: string) => string): (path: string) => string {
  return (path) => (path.endsWith('prometheus.yml') ? edit(read(path)) : read(path));
}

/** The repository's files with one file of the server's (named by its last path part) edited, as the checks read them. */
function editedFile(name: string, edit: (text: string) => string): (path: string) => string {
  return (path) => {
    if (!path.endsWith(`/${name}`)) return read(path);
    const edited = edit(read(path));
    if (edited === read(path)) throw new Error(`the edit of ${path} changed nothing`);
    return edited;
  };
}

/** Removes `value` (and the flag before it) from a service's argv-style command. */
function dropFlag(doc: Doc, service: string, value: string): void {
  const cmd = svc(doc, service).command as string[];
  const at = cmd.indexOf(value);
  if (at < 1) throw new Error(`${service}'s command has no ${value}`);
  cmd.splice(at - 1, 2);
}

function svc(doc: { services: Record<string, Record<string, unknown>> }, name: string): Record<string, unknown> {
  const found = doc.services[name];
  if (found === undefined) throw new Error(`docker-compose.yml has no service ${name}`);
  return found;
}

function envOf(doc: { services: Record<string, Record<string, unknown>> }, name: string): Record<string, string> {
  return svc(doc, name).environment as Record<string, string>;
}

describe('docker-compose.yml', () => {
  it("is Troupe's stack: pinned images, loopback ports, workers wired to Temporal", () => {
    expect(composeProblems(composeDoc(), inRepo)).toEqual([]);
  });

  it("registers exactly the dev server's search attributes", () => {
    const env = envOf(composeDoc() as { services: Record<string, Record<string, unknown>> }, 'temporal-setup');
    expect(attributeMap(env.TROUPE_SEARCH_ATTRIBUTES)).toEqual(searchAttributes);
  });

  it("mounts a dynamic config the server can read", () => {
    const parsed = dynamicConfig.safeParse(parse(read('deploy/temporal/dynamicconfig.yaml')));
    expect(parsed.success, parsed.error?.message).toBe(true);
    expect(parsed.data?.['frontend.enableServerVersionCheck']?.[0]?.value).toBe(false);
  });

  it("sets the dev server's latency settings", () => {
    const config = parse(read('deploy/temporal/dynamicconfig.yaml')) as Record<string, Array<{ value: unknown }>>;
    const settings = Object.fromEntries(serverTuning.map((s) => s.split('=') as [string, string]));
    expect(Object.fromEntries(Object.keys(settings).map((key) => [key, String(config[key]?.[0]?.value)]))).toEqual(settings);
  });

  it('names the worker image after the package version', () => {
    const version = (JSON.parse(read('package.json')) as { version: string }).version;
    expect(svc(composeDoc() as { services: Record<string, Record<string, unknown>> }, 'worker').image).toBe(`troupe-worker:${version}`);
  });

  describe('each rule catches a broken copy', () => {
    const cases: Array<[string, Parameters<typeof brokenCompose>[0], RegExp, ((path: string) => string)?]> = [
      ['a port on all interfaces', (d) => { svc(d, 'temporal').ports = ['0.0.0.0:7233:7233']; }, /127\.0\.0\.1 only/],
      ['a port without a host address', (d) => { svc(d, 'temporal-ui').ports = ['8080:8080']; }, /127\.0\.0\.1 only/],
      ['an image on latest', (d) => { svc(d, 'postgresql').image = 'postgres:latest'; }, /pin the image/],
      ['an image on a major version', (d) => { svc(d, 'postgresql').image = 'postgres:16'; }, /pin the image/],
      ['an image without a tag', (d) => { svc(d, 'temporal-ui').image = 'temporalio/ui'; }, /pin the image/],
      ['a key outside the subset', (d) => { svc(d, 'worker').network_mode = 'host'; }, /network_mode/],
      ['no restart policy', (d) => { delete svc(d, 'temporal-ui').restart; }, /temporal-ui\.restart/],
      ['a service with neither image nor build', (d) => { delete svc(d, 'worker').build; delete svc(d, 'worker').image; }, /image or a build/],
      ['a dependency on no service', (d) => { svc(d, 'worker').depends_on = { tempora: { condition: 'service_started' } }; }, /no service "tempora"/],
      ['waiting for health that is never checked', (d) => { delete svc(d, 'postgresql').healthcheck; }, /has no healthcheck/],
      ['waiting for a one-shot that restarts forever', (d) => { svc(d, 'temporal-setup').restart = 'unless-stopped'; }, /never lets it end/],
      ['a named volume not declared', (d) => { delete d.volumes?.['troupe-ssh']; }, /"troupe-ssh" is not declared/],
      ['a declared volume nobody uses', (d) => { d.volumes = { ...d.volumes, spare: null }; }, /"spare" is declared but no service uses it/],
      ['a bind mount of a missing file', (d) => { svc(d, 'temporal-setup').volumes = ['./deploy/nope.sh:/etc/troupe/temporal-setup.sh:ro']; }, /nope\.sh does not exist/],
      ['a worker that does not run the worker', (d) => { svc(d, 'worker').command = ['node', 'bin/troupe.js', 'ps']; }, /bin\/troupe\.js worker/],
      ['a worker with the local fleet (unprivileged in its container: its jobs would read the keys)', (d) => { svc(d, 'worker').command = ['node', 'bin/troupe.js', 'worker']; }, /worker --backend ssh` \(SSH fleets only\)/],
      ['a worker with every backend named', (d) => { svc(d, 'worker').command = ['node', 'bin/troupe.js', 'worker', '--backend', 'local']; }, /SSH fleets only/],
      ['a worker not built here', (d) => { svc(d, 'worker').build = './elsewhere'; }, /build: \./],
      ['a worker without a task queue', (d) => { delete envOf(d, 'worker').TROUPE_TASK_QUEUE; }, /TROUPE_TASK_QUEUE is required/],
      ['a worker pointed at no service', (d) => { envOf(d, 'worker').TEMPORAL_ADDRESS = 'temporal-server:7233'; }, /names no service/],
      ['a worker on another namespace', (d) => { envOf(d, 'worker').TEMPORAL_NAMESPACE = 'troupe'; }, /is not the workers'/],
      ['one worker', (d) => { svc(d, 'worker').deploy = { replicas: 1 }; }, /at least 2/],
      ['no state volume', (d) => { svc(d, 'worker').volumes = ['troupe-ssh:/home/troupe/.ssh']; }, /must hold the state dir TROUPE_STATE_DIR \(\/var\/lib\/troupe\)/],
      ['a state dir that is not the volume', (d) => { envOf(d, 'worker').TROUPE_STATE_DIR = '/app/.troupe/state'; }, /must hold the state dir/],
      ['no state dir', (d) => { delete envOf(d, 'worker').TROUPE_STATE_DIR; }, /TROUPE_STATE_DIR is required/],
      ['workers that do not wait for the set-up', (d) => { svc(d, 'worker').depends_on = { temporal: { condition: 'service_healthy' } }; }, /wait for temporal-setup/],
      ['a missing search attribute', (d) => { envOf(d, 'temporal-setup').TROUPE_SEARCH_ATTRIBUTES = 'TroupeRunName=Keyword TroupeRunStatus=Keyword TroupeFleet=Keyword'; }, /TroupeGroups=KeywordList/],
      ['a search attribute of the wrong type', (d) => { envOf(d, 'temporal-setup').TROUPE_SEARCH_ATTRIBUTES = 'TroupeRunName=Text TroupeRunStatus=Keyword TroupeFleet=Keyword TroupeGroups=KeywordList'; }, /TroupeRunName=Keyword/],
      ['the server without its dynamic config', (d) => { svc(d, 'temporal').volumes = ['./deploy/temporal/config/troupe.yaml:/etc/temporal/config/troupe.yaml:ro']; }, /TROUPE_TEMPORAL_DYNAMIC_CONFIG/],
      ['the server with a config of its own', (d) => { svc(d, 'temporal').volumes = ['./docker-compose.yml:/etc/temporal/config/troupe.yaml:ro', './deploy/temporal/dynamicconfig.yaml:/etc/temporal/config/dynamicconfig/troupe.yaml:ro']; }, /the bare deployment's config/],
      ['the server not on PostgreSQL', (d) => { envOf(d, 'temporal').TROUPE_POSTGRES_HOST = 'mysql'; }, /not a PostgreSQL service/],
      ['another server release', (d) => { svc(d, 'temporal').image = 'troupe-temporal-server:1.28.0'; }, /must be troupe-temporal-server:1\.29\.1, the release scripts\/deploy-local\.sh runs/],
      ['the release\'s stock server image (no Troupe authorizer)', (d) => { const t = svc(d, 'temporal'); delete t.build; t.image = 'temporalio/server:1.29.1'; t.entrypoint = (t.entrypoint as string[]).map((w) => (w === 'troupe-temporal-server' ? 'temporal-server' : w)); }, /temporal\.image: the release's server image has no Troupe authorizer[\s\S]*temporal\.build: must be \.\/deploy\/temporal-server[\s\S]*temporal\.entrypoint: must start troupe-temporal-server/],
      ['the stock image tagged over Troupe\'s build', (d) => { svc(d, 'temporal').image = 'temporalio/server:1.29.1'; }, /the release's server image has no Troupe authorizer/],
      ['a server built from elsewhere', (d) => { svc(d, 'temporal').build = './deploy/temporal'; }, /temporal\.build: must be \.\/deploy\/temporal-server/],
      ['a frontend started with --allow-no-auth', (d) => { (svc(d, 'temporal').entrypoint as string[]).splice(-1, 0, '--allow-no-auth'); }, /--allow-no-auth starts a frontend without an authorizer/],
      ['a server whose main installs no authorizer', (d) => { void d; }, /main\.go: the server must be made with temporal\.WithAuthorizer/, editedFile('main.go', (t) => t.replace('temporal.WithAuthorizer(troupeAuthorizer{}),', ''))],
      ['a server module of another release', (d) => { void d; }, /go\.mod: must require go\.temporal\.io\/server v1\.29\.1/, editedFile('go.mod', (t) => t.replace('go.temporal.io/server v1.29.1', 'go.temporal.io/server v1.28.0'))],
      ['a frontend that hides the authorizer\'s reasons', (d) => { void d; }, /frontend\.exposeAuthorizerErrors must be true/, editedFile('dynamicconfig.yaml', (t) => t.replace(/frontend\.exposeAuthorizerErrors:\n {2}- value: true/, 'frontend.exposeAuthorizerErrors:\n  - value: false'))],
      ['a frontend that does not require client certificates (no role to map)', (d) => { void d; }, /requireClientAuth: true \(the authorizer's roles/, editedFile('troupe.yaml', (t) => t.replace(/(frontend:\n {6}server:\n(?: {8}.*\n)*? {8}requireClientAuth: )true/, '$1false'))],
      ['a server image built on the toolchain image', (d) => { void d; }, /run on a small base pinned/, editedFile('Dockerfile', (t) => t.replace(/^FROM alpine:\S+$/m, 'FROM golang:1.25.3-bookworm'))],
      ['a server image on a floating base', (d) => { void d; }, /run on a small base pinned to a release tag/, editedFile('Dockerfile', (t) => t.replace(/^FROM alpine:\S+$/m, 'FROM alpine:latest'))],
      ['a server image in one stage', (d) => { void d; }, /multi-stage/, editedFile('Dockerfile', (t) => t.replace(/^FROM alpine:[\s\S]*$/m, ''))],
      ['a server image built with cgo', (d) => { void d; }, /CGO_ENABLED=0 go build/, editedFile('Dockerfile', (t) => t.replace('CGO_ENABLED=0 go build', 'go build'))],
      ['a server image running as root', (d) => { void d; }, /USER: the server must run as a non-root user/, editedFile('Dockerfile', (t) => t.replace(/^USER \S+$/m, 'USER root'))],
      ['a server image without the healthcheck\'s CLI', (d) => { void d; }, /the healthcheck's temporal CLI/, editedFile('Dockerfile', (t) => t.replace(/^COPY --from=temporalio\/admin-tools:.*$/m, ''))],
      ['a server image on an older toolchain than go.mod asks', (d) => { void d; }, /go\.mod asks for go 1\.25/, editedFile('Dockerfile', (t) => t.replace(/^FROM golang:\S+/m, 'FROM golang:1.24.9-bookworm'))],
      ['a server started without the config env', (d) => { svc(d, 'temporal').entrypoint = ['temporal-server', 'start']; }, /--env NAME/],
      ['a server that does not wait for its schema', (d) => { svc(d, 'temporal').depends_on = { postgresql: { condition: 'service_healthy' } }; }, /wait for temporal-schema/],
      ['a schema step with a script of its own', (d) => { svc(d, 'temporal-schema').volumes = ['./deploy/temporal-setup.sh:/etc/troupe/schema.sh:ro']; }, /deploy\/temporal\/schema\.sh/],
      ['a schema step on another database', (d) => { envOf(d, 'temporal-schema').SQL_HOST = 'db'; }, /SQL_HOST must be/],
      ['a long-running service without a healthcheck', (d) => { delete svc(d, 'worker').healthcheck; }, /worker: a long-running service needs a healthcheck/],
      ['workers that serve no metrics', (d) => { delete envOf(d, 'worker').TROUPE_METRICS_ADDRESS; }, /TROUPE_METRICS_ADDRESS must be HOST:PORT/],
      ['metrics on a port Prometheus does not scrape', (d) => { envOf(d, 'worker').TROUPE_METRICS_ADDRESS = '0.0.0.0:9999'; }, /metrics port 9999/],
      ['no Prometheus', (d) => { delete d.services.prometheus; delete svc(d, 'grafana').depends_on; }, /no "prometheus" service/],
      ['one gateway', (d) => { delete d.services['gateway-b']; delete d.volumes?.['gateway-b-state']; dropFlag(d, 'worker', 'http://gateway-b:8081'); }, /at least 2 gateways/],
      ['a gateway from another image', (d) => { svc(d, 'gateway-a').image = 'troupe-gateway:0.1.0'; }, /gateway-a\.image: must be the workers' image/],
      ['a gateway whose admin API only its own loopback reaches', (d) => { (svc(d, 'gateway-a').command as string[])[6] = '127.0.0.1:8081'; }, /0\.0\.0\.0:PORT/],
      ['a gateway that publishes no data plane', (d) => { delete svc(d, 'gateway-b').ports; }, /gateway-b\.ports: must publish/],
      ['a gateway that publishes its admin API', (d) => { svc(d, 'gateway-a').ports = ['127.0.0.1:8090:8080', '127.0.0.1:8092:8081']; }, /admin API \(8081\) stays/],
      ['a gateway whose tables die with its container', (d) => { delete svc(d, 'gateway-a').volumes; }, /--state \/var\/lib\/troupe\/gateway\.json must be on a writable named volume/],
      ['two gateways on one state volume', (d) => { svc(d, 'gateway-b').volumes = ['gateway-a-state:/var/lib/troupe']; delete d.volumes?.['gateway-b-state']; }, /each gateway needs its own volume/],
      ['a gateway token in the environment', (d) => { svc(d, 'gateway-a').environment = { TROUPE_GATEWAY_ADMIN_TOKEN: 'x'.repeat(32) }; }, /TROUPE_GATEWAY_ADMIN_TOKEN puts a secret in this file/],
      ['a secret taken from the environment', (d) => { d.secrets = { 'gateway-admin-token': { environment: 'TROUPE_GATEWAY_ADMIN_TOKEN' } }; }, /secrets\.gateway-admin-token/],
      ['a secret read from a file git keeps', (d) => { d.secrets = { 'gateway-admin-token': { file: './deploy/gateway-admin.token' } }; }, /git does not ignore/],
      ['a secret not declared', (d) => { delete d.secrets; }, /"gateway-admin-token" is not declared under secrets/],
      ['a gateway without the token secret', (d) => { delete svc(d, 'gateway-b').secrets; }, /gateway-b\.command: --admin-token-file must name a secret/],
      ['a gateway healthy without asking its admin API', (d) => { svc(d, 'gateway-a').healthcheck = { test: ['CMD', 'true'], interval: '10s', timeout: '5s', retries: 3 }; }, /gateway-a\.healthcheck/],
      ['workers that do not push to a gateway', (d) => { dropFlag(d, 'worker', 'http://gateway-b:8081'); }, /must push to gateway-b/],
      ['workers without the gateways\' token', (d) => { dropFlag(d, 'worker', '/run/secrets/gateway-admin-token'); }, /--gateway-token-file must name a secret/],
      ['a Prometheus that does not scrape the gateways', (d) => { void d; }, /must scrape the gateway gateway-a:8081/, brokenPrometheus((t) => t.replace('gateway-a:8081, ', ''))],
      ['a Prometheus scraping the gateways without the token', (d) => { delete svc(d, 'prometheus').secrets; }, /must send the gateways' token/],
      ['no certificates service', (d) => { delete d.services['temporal-certs']; for (const s of Object.values(d.services)) delete (s.depends_on as Record<string, unknown> | undefined)?.['temporal-certs']; }, /no "temporal-certs" service/],
      ['certificates made by a script of their own', (d) => { svc(d, 'temporal-certs').volumes = ['./deploy/temporal-setup.sh:/etc/troupe/make-certs.sh:ro', 'troupe-tls:/etc/troupe/tls']; }, /must run \.\/deploy\/make-certs\.sh/],
      ['a server certificate without the service name', (d) => { svc(d, 'temporal-certs').entrypoint = (svc(d, 'temporal-certs').entrypoint as string[]).map((w) => w.replace(' DNS:temporal', '')); }, /must name DNS:temporal/],
      ['a server without TLS', (d) => { delete envOf(d, 'temporal').TROUPE_TEMPORAL_TLS_DIR; }, /temporal\.environment: TROUPE_TEMPORAL_TLS_DIR/],
      ['a server that takes no users\' tokens', (d) => { delete envOf(d, 'temporal').TROUPE_TEMPORAL_TOKEN_KEY; }, /temporal\.environment: TROUPE_TEMPORAL_TOKEN_KEY must be/],
      ['a server healthcheck without TLS', (d) => { svc(d, 'temporal').healthcheck = { test: ['CMD', 'temporal', 'operator', 'cluster', 'health', '--address', '127.0.0.1:7233'], interval: '10s', timeout: '5s', retries: 3 }; }, /temporal\.healthcheck: must ask with --tls-ca-path/],
      ['a server that cannot read its key', (d) => { delete svc(d, 'temporal').user; }, /temporal\.user: must be 1000:1000/],
      ['workers without the client certificate', (d) => { delete envOf(d, 'worker').TEMPORAL_TLS_CLIENT_CERT_PATH; }, /worker\.environment: TEMPORAL_TLS_SERVER_CA_CERT_PATH, TEMPORAL_TLS_CLIENT_CERT_PATH/],
      ['workers without the certificates volume', (d) => { svc(d, 'worker').volumes = (svc(d, 'worker').volumes as string[]).filter((v) => !v.startsWith('troupe-tls:')); }, /worker\.volumes: must mount troupe-tls:\/etc\/troupe\/tls:ro/],
      ['workers that may write the certificates', (d) => { svc(d, 'worker').volumes = (svc(d, 'worker').volumes as string[]).map((v) => v.replace('/etc/troupe/tls:ro', '/etc/troupe/tls')); }, /worker\.volumes: must mount troupe-tls/],
      ['a set-up without TLS', (d) => { for (const k of Object.keys(envOf(d, 'temporal-setup'))) if (k.startsWith('TEMPORAL_TLS_')) delete envOf(d, 'temporal-setup')[k]; }, /temporal-setup\.environment: TEMPORAL_TLS_SERVER_CA_CERT_PATH/],
      ['a set-up that does not wait for the certificates', (d) => { delete (svc(d, 'temporal-setup').depends_on as Record<string, unknown>)['temporal-certs']; }, /temporal-setup\.depends_on: must wait for temporal-certs/],
      ['a Web UI without the client key', (d) => { delete envOf(d, 'temporal-ui').TEMPORAL_TLS_KEY; }, /temporal-ui\.environment: TEMPORAL_TLS_CA, TEMPORAL_TLS_CERT and TEMPORAL_TLS_KEY/],
      ['a Web UI with a server name the certificate lacks', (d) => { envOf(d, 'temporal-ui').TEMPORAL_TLS_SERVER_NAME = 'temporal.example'; }, /temporal-ui\.environment: TEMPORAL_TLS_SERVER_NAME must be a name/],
      ['a Web UI as a user who cannot read the client key', (d) => { svc(d, 'temporal-ui').user = '10001:10001'; }, /temporal-ui\.user: must be 5000:5000/],
      ['a key copy nobody made', (d) => { envOf(d, 'temporal-ui').TEMPORAL_TLS_KEY = '/etc/troupe/tls/user-web.key'; }, /must chown \/etc\/troupe\/tls\/user-web\.key \(or install a 0600 copy of user\.key/],
      ['a key copy readable by all', (d) => { svc(d, 'temporal-certs').entrypoint = (svc(d, 'temporal-certs').entrypoint as string[]).map((w) => w.replace('install -m 600', 'install -m 644')); }, /must chown \/etc\/troupe\/tls\/user-ui\.key/],
      ['a Web UI key copied from the worker key', (d) => { svc(d, 'temporal-certs').entrypoint = (svc(d, 'temporal-certs').entrypoint as string[]).map((w) => w.replace('tls/user.key /etc/troupe/tls/user-ui.key', 'tls/worker.key /etc/troupe/tls/user-ui.key')); }, /must chown \/etc\/troupe\/tls\/user-ui\.key \(or install a 0600 copy of user\.key/],
      ['a Web UI with the worker certificate (anyone who opens it could act as a worker)', (d) => { Object.assign(envOf(d, 'temporal-ui'), { TEMPORAL_TLS_CERT: '/etc/troupe/tls/worker.pem', TEMPORAL_TLS_KEY: '/etc/troupe/tls/worker-ui.key' }); }, /temporal-ui\.environment: TEMPORAL_TLS_CA, TEMPORAL_TLS_CERT and TEMPORAL_TLS_KEY must be \/etc\/troupe\/tls\/ca\.pem, user\.pem and user\.key/],
      ['a set-up with the worker certificate (the authorizer refuses it the namespace)', (d) => { Object.assign(envOf(d, 'temporal-setup'), { TEMPORAL_TLS_CLIENT_CERT_PATH: '/etc/troupe/tls/worker.pem', TEMPORAL_TLS_CLIENT_KEY_PATH: '/etc/troupe/tls/worker.key' }); svc(d, 'temporal-setup').user = '10001:10001'; }, /temporal-setup\.environment: .* must be \/etc\/troupe\/tls\/ca\.pem, server\.pem and server\.key .*operator's call/],
      ['a set-up that cannot read the services\' key', (d) => { svc(d, 'temporal-setup').user = '10001:10001'; }, /temporal-setup\.user: must be 1000:1000, the owner of \/etc\/troupe\/tls\/server\.key/],
      ['workers with the user certificate', (d) => { Object.assign(envOf(d, 'worker'), { TEMPORAL_TLS_CLIENT_CERT_PATH: '/etc/troupe/tls/user.pem', TEMPORAL_TLS_CLIENT_KEY_PATH: '/etc/troupe/tls/user.key' }); }, /worker\.environment: .* must be \/etc\/troupe\/tls\/ca\.pem, worker\.pem and worker\.key/],
      ['a new client with the services\' certificate', (d) => { d.services.poller = { image: 'temporalio/admin-tools:1.29.1-tctl-1.18.4-cli-1.5.0', user: '1000:1000', depends_on: { 'temporal-certs': { condition: 'service_completed_successfully' } }, volumes: ['troupe-tls:/etc/troupe/tls:ro'], environment: { TEMPORAL_ADDRESS: 'temporal:7233', TEMPORAL_TLS_SERVER_CA_CERT_PATH: '/etc/troupe/tls/ca.pem', TEMPORAL_TLS_CLIENT_CERT_PATH: '/etc/troupe/tls/server.pem', TEMPORAL_TLS_CLIENT_KEY_PATH: '/etc/troupe/tls/server.key', TEMPORAL_TLS_SERVER_NAME: 'temporal' }, restart: 'no' }; }, /poller\.environment: .* must be \/etc\/troupe\/tls\/ca\.pem, user\.pem and user\.key/],
      ['a Web UI whose codec requests carry no credential', (d) => { delete envOf(d, 'temporal-ui').TEMPORAL_CODEC_INCLUDE_CREDENTIALS; }, /TEMPORAL_CODEC_INCLUDE_CREDENTIALS must be "true"/],
      ['a codec server that trusts an Origin', (d) => { (svc(d, 'codec-server').command as string[]).push('--trust-origin'); }, /codec-server\.command: --trust-origin admits any local process/],
      ['a key pasted into the environment', (d) => { envOf(d, 'temporal-ui').TEMPORAL_TLS_KEY = '-----BEGIN PRIVATE KEY-----'; }, /TEMPORAL_TLS_KEY puts a secret in this file/],
      ['a new service that reaches the frontend without TLS', (d) => { d.services.poller = { image: 'temporalio/admin-tools:1.29.1-tctl-1.18.4-cli-1.5.0', environment: { TEMPORAL_ADDRESS: 'temporal:7233' }, restart: 'no' }; }, /poller\.depends_on: must wait for temporal-certs[\s\S]*poller\.volumes: must mount troupe-tls[\s\S]*poller\.environment: TEMPORAL_TLS_SERVER_CA_CERT_PATH/],
      ['a Grafana without the dashboard', (d) => { svc(d, 'grafana').volumes = ['./deploy/grafana/provisioning:/etc/grafana/provisioning:ro', 'grafana-data:/var/lib/grafana']; }, /must mount the dashboard/],
    ];
    it.each(cases)('%s', (_label, edit, expected, readText) => {
      const problems = brokenCompose(edit, readText);
      expect(problems.join('\n')).toMatch(expected);
    });
  });
});

describe('scripts/deploy-local.sh', () => {
  it('makes its certificates with deploy/make-certs.sh, the script temporal-certs runs', () => {
    expect(deployLocalCertProblems(read('scripts/deploy-local.sh'))).toEqual([]);
  });

  it('catches a copy that makes them with openssl itself, or not with the shared script', () => {
    const script = read('scripts/deploy-local.sh');
    const own = script.replace('ensure_certs() {', 'ensure_certs() {\n  openssl genpkey -algorithm EC -out "$tls/ca.key"');
    expect(deployLocalCertProblems(own).join('\n')).toMatch(/runs openssl itself/);
    const other = script.replace('"$repo/deploy/make-certs.sh"', '"$repo/scripts/certs.sh"');
    expect(other).not.toBe(script);
    expect(deployLocalCertProblems(other).join('\n')).toMatch(/must make its certificates with/);
  });
});

describe('Dockerfile', () => {
  const dockerfile = read('Dockerfile');
  const dockerignore = read('.dockerignore');

  it('is pinned, installs from the lock file, runs the worker as a non-root user', () => {
    expect(dockerfileProblems(dockerfile, dockerignore, inRepo)).toEqual([]);
  });

  it("copies the worker's healthcheck script into the image", () => {
    const worker = svc(composeDoc() as { services: Record<string, Record<string, unknown>> }, 'worker');
    const script = (worker.healthcheck as { test: string[] }).test.find((word) => word.endsWith('.ts'));
    const copied = dockerInstructions(dockerfile).filter((s) => s.keyword === 'COPY').flatMap((s) => s.args.split(/\s+/));
    expect(script).toBeDefined();
    expect(copied).toContain(script);
  });

  it('can install with --omit=dev because tsx is a runtime dependency', () => {
    const pkg = JSON.parse(read('package.json')) as { dependencies: Record<string, string> };
    expect(pkg.dependencies.tsx).toBeDefined();
  });

  describe('each rule catches a broken copy', () => {
    const cases: Array<[string, string, string, RegExp]> = [
      ['a floating base image', 'FROM node:20.19.5-bookworm-slim', 'FROM node:20-bookworm-slim', /exact Node 20 release/],
      ['root as the user', 'USER troupe', 'USER root', /non-root/],
      ['no user at all', 'USER troupe', '', /non-root/],
      ['npm install in place of npm ci', 'RUN npm ci --omit=dev', 'RUN npm install --omit=dev', /npm ci --omit=dev/],
      ['dev dependencies installed', 'RUN npm ci --omit=dev', 'RUN npm ci', /npm ci --omit=dev/],
      ['no SSH client', 'openssh-client iproute2', 'iproute2', /openssh-client/],
      ['workflows left out', 'COPY workflows/ ./workflows/', '', /needs workflows\//],
      ['another command', 'CMD ["node", "bin/troupe.js", "worker"]', 'CMD ["node", "bin/troupe.js"]', /CMD/],
    ];
    it.each(cases)('%s', (_label, from, to, expected) => {
      expect(dockerfile).toContain(from);
      expect(dockerfileProblems(dockerfile.replace(from, to), dockerignore, inRepo).join('\n')).toMatch(expected);
    });

    it('a .dockerignore that lets node_modules in, or hides a copied folder', () => {
      const problems = dockerfileProblems(dockerfile, dockerignore.replace(/^node_modules$/m, 'src'), inRepo).join('\n');
      expect(problems).toMatch(/must exclude node_modules/);
      expect(problems).toMatch(/src\/ is excluded/);
    });
  });
});
