/**
 * A stand-in for the docker CLI, for hosts that should look like they run containers: `version`
 * answers as a daemon would, `run` records its arguments (one file per run, NUL-separated) and
 * runs the command on the host in the given working directory (no isolation: what is checked is
 * what the runner asks docker for), `rm -f` kills what `run` started.
 */
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
        --network|--gpus|--device|--group-add|-v|-e) shift 2 ;;
        -*) echo "fake docker: unknown option $1" >&2; exit 125 ;;
        *) break ;;
      esac
    done
    shift # the image
    echo $$ > "$state/$name.pid"
    cd "$workdir" && exec "$entrypoint" "$@"
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
