import { defineConfig } from 'vitest/config';

/**
 * Two projects. `unit`: pure code and real local programs (bash, ssh-keygen), no Temporal server, no
 * sshd hosts, no root needed; its files run in parallel (`npm run test:unit`, the fast loop).
 * `server`: everything against the one shared dev server (started by the global set-up) and shared
 * host resources (namespaces, ports), so its files run one at a time, after the unit project.
 */
export default defineConfig({
  test: {
    pool: 'forks',
    testTimeout: 120_000,
    hookTimeout: 180_000,
    projects: [
      {
        extends: true,
        test: {
          name: 'unit',
          include: ['test/unit/**/*.test.ts', 'src/run-core/**/*.test.ts'],
          fileParallelism: true,
          maxWorkers: 2,
          sequence: { groupOrder: 0 },
        },
      },
      {
        extends: true,
        test: {
          name: 'server',
          include: ['test/workflow/**/*.test.ts', 'test/e2e/**/*.test.ts', 'test/deploy/**/*.test.ts'],
          globalSetup: ['test/global-setup.ts'],
          setupFiles: ['test/setup-runtime.ts'],
          fileParallelism: false,
          sequence: { groupOrder: 1 },
        },
      },
    ],
  },
});
