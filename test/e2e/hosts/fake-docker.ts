/**
 * A stand-in for the docker CLI, for hosts that should look like they run containers: `version`
 * answers as a daemon would, `run` records its arguments (one file per run, NUL-separated) and
 * runs the command on the host in the given working directory (no isolation, no limits: what is
 * checked is what the runner asks docker for), `rm -f` kills what `run` started and still runs,
 * `inspect --format '{{.State.OOMKilled}}'` says false unless the test asked for one OOM kill
 * (FAKE_DOCKER_OOM_NEXT in the state directory: said once, then gone).
 *
 * `run` waits for the command as a child (rather than exec'ing it) so that its pid file is gone
 * once it ends: the `rm -f` after every run must not kill a pid the system has given to another process since.
 */
export const FAKE_DOCKER_OOM_NEXT = 'oom-next';
export function fakeDocker(stateDir: string): string {
  return `#!/bin/bash
state='${stateDir.replaceAll("'", `'\\''`)}'
mkdir -p "$state/runs"
case "$1" in
  version) echo "27.0.0-fake" ;;
  run)
    shift
    n=$(ls "$state/runs" | wc -l)
    printf '%s\\0' "$@" > "$state/runs/$((n + 1))"
    name= workdir=/ entrypoint=
    while [ $# -gt 0 ]; do
      case "$1" in
        --rm|--init) shift ;;
        --name) name=$2; shift 2 ;;
        -w) workdir=$2; shift 2 ;;
        --entrypoint) entrypoint=$2; shift 2 ;;
        --network|--gpus|--device|--group-add|-v|-e|--memory|--memory-swap|--cpus|--pids-limit|--shm-size) shift 2 ;;
        -*) echo "fake docker: unknown option $1" >&2; exit 125 ;;
        *) break ;;
      esac
    done
    shift # the image
    ( cd "$workdir" && exec "$entrypoint" "$@" ) &
    child=$!
    echo "$child" > "$state/$name.pid"
    # docker's signal proxy: the client's SIGTERM goes to the container.
    trap 'kill -TERM "$child" 2>/dev/null' TERM
    wait "$child"; code=$?
    while kill -0 "$child" 2>/dev/null; do wait "$child"; code=$?; done
    rm -f "$state/$name.pid"
    exit "$code"
    ;;
  inspect)
    if [ -e "$state/${FAKE_DOCKER_OOM_NEXT}" ]; then rm -f "$state/${FAKE_DOCKER_OOM_NEXT}"; echo true; else echo false; fi
    ;;
  rm)
    shift; [ "$1" = -f ] && shift
    [ -s "$state/$1.pid" ] && kill -KILL "$(cat "$state/$1.pid")" 2>/dev/null
    rm -f "$state/$1.pid"
    echo "$1"
    ;;
  *) echo "fake docker: unsupported command $1" >&2; exit 125 ;;
esac
`;
}
