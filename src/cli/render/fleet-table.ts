import type { FleetListing } from '../../fleet/fleet-client';
import { hostKeyFile } from '../../fleet/host-key-file';
import type { JobPlacement } from '../../fleet/placement-preview';
import type { FleetHostState, FleetState, HostKey } from '../../contract/fleet-messages';
import { paint, type Style } from './style';
import { renderTable } from './table';

/** `root@10.0.0.5` (`:port` when not 22; `via jump` when behind a proxy_jump host). */
export function hostAddress(host: FleetHostState): string {
  const { user, hostname, port, proxy_jump } = host.spec.target;
  const self = `${user}@${hostname}${port === 22 ? '' : `:${port}`}`;
  return proxy_jump ? `${self} via ${proxy_jump.hostname}` : self;
}

function gpusOf(host: FleetHostState): string {
  const gpus = host.facts?.gpus ?? [];
  if (!host.facts) return '-';
  if (gpus.length === 0) return '-';
  return gpus.map((g) => `${g.count}×${g.name} (${Math.round(g.memory_gb)}GB)`).join(' + ');
}

/** dstack's words for an instance: idle, busy; and ours for a host that cannot be used. */
export function hostStatus(host: FleetHostState): 'idle' | 'busy' | 'probing' | 'unreachable' {
  if (host.status === 'ready') return host.holder ? 'busy' : 'idle';
  return host.status;
}

function paintHostStatus(style: Style, host: FleetHostState): string {
  const status = hostStatus(host);
  const how = status === 'idle' ? 'green' : status === 'busy' ? 'cyan' : status === 'unreachable' ? 'red' : 'yellow';
  return paint(style, how, status);
}

function keyText(style: Style, key: HostKey | null): string {
  if (!key) return '-';
  const how =
    key.source === 'pinned' ? paint(style, 'yellow', 'PINNED at first contact') : key.source === 'known_hosts' ? 'known_hosts' : 'fingerprint in config';
  return `${key.fingerprint} (${how})`;
}

/** What `troupe fleet apply` shows: per host what it has, its key and how the key was verified, its state. */
export function renderFleetApply(state: FleetState, style: Style): string[] {
  const rows = state.hosts.map((h) => [
    hostAddress(h),
    h.facts ? String(h.facts.cpus) : '-',
    h.facts ? `${h.facts.memory_gb}GB` : '-',
    h.facts ? `${h.facts.disk_gb}GB free` : '-',
    gpusOf(h),
    h.internal_ip ?? '-',
    keyText(style, h.host_key),
    paintHostStatus(style, h),
  ]);
  const lines = renderTable(['HOST', 'CPUS', 'MEMORY', 'DISK', 'GPUS', 'INTERNAL IP', 'HOST KEY', 'STATUS'], rows, style, {
    alignRight: new Set([1]),
  });
  const unreachable = state.hosts.filter((h) => h.status === 'unreachable');
  if (unreachable.length > 0) {
    lines.push('', paint(style, 'red', `${unreachable.length} host(s) cannot be used:`));
    for (const h of unreachable) lines.push(`  ${hostAddress(h)}: ${h.reason ?? 'unreachable'}`);
  }
  const pinned = state.hosts.flatMap((h) => [
    ...(h.host_key?.source === 'pinned' ? [{ host: hostAddress(h), key: h.host_key, via: '' }] : []),
    ...(h.jump_host_key?.source === 'pinned' && h.spec.target.proxy_jump
      ? [{ host: `${h.spec.target.proxy_jump.user}@${h.spec.target.proxy_jump.hostname}`, key: h.jump_host_key, via: ' (jump host)' }]
      : []),
  ]);
  const unique = [...new Map(pinned.map((p) => [`${p.host} ${p.key.fingerprint}`, p])).values()];
  if (unique.length > 0) {
    lines.push(
      '',
      paint(style, 'yellow', `${unique.length} host key(s) were PINNED at first contact: no known_hosts entry or configured fingerprint knew them.`),
      'Compare each fingerprint with the one the host itself shows before you run anything there:',
      ...unique.map((p) => `  ${p.host}${p.via}: ${p.key.fingerprint} — on the host: ssh-keygen -lf ${hostKeyFile(p.key.algorithm)}`),
      'From now on only these keys are accepted; a host that presents another one is refused.',
    );
  }
  return lines;
}

/** `troupe fleet show NAME`: per host what it has, its state and which run/job holds it. */
export function renderFleetHosts(state: FleetState, style: Style): string[] {
  const rows = state.hosts.map((h) => [
    String(h.index),
    hostAddress(h),
    h.internal_ip ?? '-',
    h.facts ? String(h.facts.cpus) : '-',
    h.facts ? `${h.facts.memory_gb}GB` : '-',
    gpusOf(h),
    paintHostStatus(style, h),
    h.holder ? `${h.holder.run_name}/job ${h.holder.job_num} (${h.holder.job_name})` : '-',
  ]);
  const lines = renderTable(['#', 'HOST', 'INTERNAL IP', 'CPUS', 'MEMORY', 'GPUS', 'STATUS', 'HELD BY'], rows, style, {
    alignRight: new Set([0, 3]),
  });
  for (const h of state.hosts.filter((x) => x.status === 'unreachable')) {
    lines.push(`  ${paint(style, 'red', `${hostAddress(h)}:`)} ${h.reason ?? 'unreachable'}`);
  }
  return lines;
}

/** `troupe fleet list`: a row per fleet. */
export function renderFleetList(fleets: FleetListing[], style: Style): string[] {
  const rows = fleets.map(({ name, state, stateError }) => {
    if (!state) return [name, '-', '-', '-', '-', '-', paint(style, 'red', stateError ?? 'unknown')];
    const count = (status: ReturnType<typeof hostStatus>) => state.hosts.filter((h) => hostStatus(h) === status).length;
    const gpus = state.hosts.reduce((sum, h) => sum + (h.facts?.gpus.reduce((n, g) => n + g.count, 0) ?? 0), 0);
    return [name, state.placement, String(state.hosts.length), String(count('idle')), String(count('busy')), String(gpus), count('unreachable') > 0 ? paint(style, 'red', `${count('unreachable')} unreachable`) : ''];
  });
  return renderTable(['FLEET', 'PLACEMENT', 'HOSTS', 'IDLE', 'BUSY', 'GPUS', ''], rows, style, { alignRight: new Set([2, 3, 4, 5]) });
}

/** The plan's preview on a fleet: which host each job would get (nothing is taken). */
export function renderPlacement(fleet: string, placements: JobPlacement[], style: Style): string[] {
  const rows = placements.map((p) => [
    String(p.job_num),
    `${p.group_name}/${p.group_job_index}`,
    p.host ? hostAddress(p.host) : paint(style, 'red', 'no host'),
    p.host ? (p.host.internal_ip ?? '-') : '-',
    p.host ? gpusOf(p.host) : (p.reason ?? ''),
  ]);
  return [
    `${paint(style, 'bold', `Placement on fleet ${fleet}`)} (a preview: hosts are taken when the run starts)`,
    ...renderTable(['JOB', 'NODE', 'HOST', 'INTERNAL IP', 'GPUS'], rows, style, { alignRight: new Set([0]) }),
  ];
}
