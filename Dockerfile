# The Troupe worker: `node bin/troupe.js worker`, polling one task queue of a Temporal service.
# Build: docker build -t troupe .   (docker-compose.yml builds it for its worker service)

# Pinned to one Node 20 release so a rebuild gives the same runtime (the Temporal SDK's native
# bridge needs Node >= 20.3; slim bookworm matches the glibc it is built for).
FROM node:20.19.5-bookworm-slim

# openssh-client: ssh, ssh-keygen and ssh-keyscan, to fetch and check fleet hosts' keys from inside
# the container (the SSH backend itself speaks SSH in-process). iproute2: `ip`, with which the
# local fleet makes a network namespace per node when the container may (see below).
RUN apt-get update \
 && apt-get install -y --no-install-recommends openssh-client iproute2 \
 && rm -rf /var/lib/apt/lists/*

# The worker runs as an unprivileged user. The local fleet's per-node network namespaces need root
# with CAP_NET_ADMIN (and CAP_SYS_ADMIN, since `ip netns add` mounts), which this user does not have:
# in a container the local fleet falls back to loopback addresses. The SSH backend (fleets of real
# hosts) needs no privilege and is the production backend.
# Both folders are volume mount points; a new volume takes the owner and mode it finds here.
# /var/lib/troupe: the backends' state on this machine (TROUPE_STATE_DIR). ~/.ssh: the identity
# files a fleet names (identity_file: ~/.ssh/id_ed25519) and the known_hosts of its hosts.
RUN groupadd --system --gid 10001 troupe \
 && useradd --system --uid 10001 --gid troupe --home-dir /home/troupe --create-home --shell /usr/sbin/nologin troupe \
 && install -d -o troupe -g troupe -m 0700 /var/lib/troupe /var/lib/troupe-keys /home/troupe/.ssh

WORKDIR /app
# The default state dir would be inside /app, which the worker may not write.
ENV NODE_ENV=production \
    TROUPE_STATE_DIR=/var/lib/troupe

# Dependencies first, so a source change does not reinstall them. tsx is a runtime dependency:
# the CLI and the worker run the TypeScript sources directly, with no build step.
COPY package.json package-lock.json ./
RUN npm ci --omit=dev --no-audit --no-fund \
 && npm cache clean --force

# Sources stay owned by root: the worker can read its code but not change it.
COPY tsconfig.json ./
COPY bin/ ./bin/
COPY src/ ./src/
COPY workflows/ ./workflows/
COPY activities/ ./activities/
COPY deploy/worker-healthcheck.ts ./deploy/

USER troupe
CMD ["node", "bin/troupe.js", "worker"]
