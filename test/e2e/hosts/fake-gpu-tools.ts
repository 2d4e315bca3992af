/**
 * Stand-ins for nvidia-smi, amd-smi and rocm-smi that print what the real tools print for the
 * queries host detection makes, for the GPUs a test host is given. They live in a folder that
 * is bind-mounted over /usr/local/sbin in that host's mount namespace only.
 */

export interface FakeGpus {
  name: string;
  memoryMiB: number;
  count: number;
}

/** What the fake nvidia-smi reports GPU i busy with (usage queries): a figure a test can predict. */
export function fakeGpuLoad(gpus: FakeGpus, i: number): { utilization: number; memoryUsedMiB: number } {
  return { utilization: (40 + 25 * i) % 100, memoryUsedMiB: Math.floor(gpus.memoryMiB / 4) * ((i % 3) + 1) };
}

function shellWord(value: string): string {
  return `'${value.replaceAll("'", `'\\''`)}'`;
}

/** nvidia-smi: `--query-gpu=<fields> --format=csv[,noheader][,nounits]`, `-L`, and a bare summary. */
export function fakeNvidiaSmi(gpus: FakeGpus): string {
  return `#!/bin/bash
# Fake nvidia-smi (Troupe test harness): ${gpus.count} x ${gpus.name}
name=${shellWord(gpus.name)}
mem=${gpus.memoryMiB}
count=${gpus.count}
query="" format=""
for arg in "$@"; do
  case "$arg" in
    --query-gpu=*) query="\${arg#--query-gpu=}" ;;
    --format=*) format="\${arg#--format=}" ;;
    -L|--list-gpus)
      for ((i = 0; i < count; i++)); do
        printf 'GPU %d: %s (UUID: GPU-00000000-0000-0000-0000-%012d)\\n' "$i" "$name" "$i"
      done
      exit 0 ;;
  esac
done
if [ -z "$query" ]; then
  printf 'NVIDIA-SMI 550.54.15    Driver Version: 550.54.15    CUDA Version: 12.4\\n'
  for ((i = 0; i < count; i++)); do printf '%d  %s  0MiB / %dMiB\\n' "$i" "$name" "$mem"; done
  exit 0
fi
nounits=0 noheader=0
case ",$format," in *,nounits,*) nounits=1 ;; esac
case ",$format," in *,noheader,*) noheader=1 ;; esac
IFS=, read -ra fields <<< "$query"
if [ "$noheader" = 0 ]; then
  header=""
  for f in "\${fields[@]}"; do
    h="$f"
    case "$f" in memory.total|memory.used|memory.free) [ "$nounits" = 0 ] && h="$f [MiB]" ;; utilization.*) [ "$nounits" = 0 ] && h="$f [%]" ;; esac
    header="\${header:+$header, }$h"
  done
  printf '%s\\n' "$header"
fi
for ((i = 0; i < count; i++)); do
  line=""
  for f in "\${fields[@]}"; do
    case "$f" in
      name|gpu_name) v="$name" ;;
      index) v="$i" ;;
      count) v="$count" ;;
      uuid|gpu_uuid) v="$(printf 'GPU-00000000-0000-0000-0000-%012d' "$i")" ;;
      memory.total) v="$mem" ;;
      utilization.gpu) v=$(( (40 + 25 * i) % 100 )) ;;
      memory.used) v=$(( mem / 4 * (i % 3 + 1) )) ;;
      memory.free) v=$(( mem - mem / 4 * (i % 3 + 1) )) ;;
      driver_version) v=550.54.15 ;;
      pci.bus_id) v="$(printf '00000000:%02X:00.0' $((i + 1)))" ;;
      *) echo "Field \\"$f\\" is not a valid field to query." >&2; exit 2 ;;
    esac
    case "$f" in memory.*) [ "$nounits" = 0 ] && v="$v MiB" ;; utilization.*) [ "$nounits" = 0 ] && v="$v %" ;; esac
    line="\${line:+$line, }$v"
  done
  printf '%s\\n' "$line"
done
`;
}

/** amd-smi: `static [--asic] [--vram] --json` (the list form of ROCm 6.x) and `list`. */
export function fakeAmdSmi(gpus: FakeGpus): string {
  const devices = Array.from({ length: gpus.count }, (_, i) => ({
    gpu: i,
    asic: {
      market_name: gpus.name,
      vendor_id: '0x1002',
      vendor_name: 'Advanced Micro Devices Inc. [AMD/ATI]',
      device_id: '0x74a1',
      target_graphics_version: 'gfx942',
    },
    vram: { type: 'HBM3', vendor: 'N/A', size: { value: gpus.memoryMiB, unit: 'MB' } },
  }));
  return `#!/bin/bash
# Fake amd-smi (Troupe test harness): ${gpus.count} x ${gpus.name}
case "$1" in
  static)
    case " $* " in
      *" --json "*) cat <<'JSON'
${JSON.stringify(devices, null, 2)}
JSON
      ;;
      *) for ((i = 0; i < ${gpus.count}; i++)); do printf 'GPU: %d\\n    ASIC:\\n        MARKET_NAME: %s\\n' "$i" ${shellWord(gpus.name)}; done ;;
    esac ;;
  list)
    for ((i = 0; i < ${gpus.count}; i++)); do printf 'GPU: %d\\n    BDF: 0000:%02x:00.0\\n' "$i" $((i + 1)); done ;;
  *) echo "usage: amd-smi [static|list] ..." >&2; exit 2 ;;
esac
`;
}

/** rocm-smi: `--showproductname --showmeminfo vram --json` (values are strings, as the real tool prints). */
export function fakeRocmSmi(gpus: FakeGpus): string {
  const cards: Record<string, Record<string, string>> = {};
  for (let i = 0; i < gpus.count; i++) {
    cards[`card${i}`] = {
      'Card Series': gpus.name,
      'Card Model': '0x74a1',
      'Card Vendor': 'Advanced Micro Devices, Inc. [AMD/ATI]',
      'VRAM Total Memory (B)': String(gpus.memoryMiB * 1024 * 1024),
      'VRAM Total Used Memory (B)': '0',
    };
  }
  return `#!/bin/bash
# Fake rocm-smi (Troupe test harness): ${gpus.count} x ${gpus.name}
case " $* " in
  *" --json "*) cat <<'JSON'
${JSON.stringify(cards)}
JSON
  ;;
  *) for ((i = 0; i < ${gpus.count}; i++)); do printf 'GPU[%d]\\t\\t: Card Series: \\t\\t%s\\n' "$i" ${shellWord(gpus.name)}; done ;;
esac
`;
}
