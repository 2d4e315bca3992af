import { watch, type FSWatcher } from 'node:fs';
import { dirname } from 'node:path';

/**
 * Waits on files that a job's processes write (its start claim, its namespaces' `ns_init`, its SSH
 * server's pid file) through inotify on their folders instead of looking every few ms: a thousand
 * starts under way, 32 at a time, each looked at its files hundreds of times, and those reads were
 * most of the worker's CPU for a large start. Node's watchers of one process share one inotify
 * descriptor, so a watch costs no descriptor of its own.
 *
 * Use: add the folders, look at the files, then `changed()`, and look again. A folder that is not
 * there yet is tried again at each `changed()`, which returns at once when it is newly watched (what
 * happened in it before the watch is then looked at).
 *
 * Once every folder is watched (or its parent is), a wait without a change lasts WATCHED_LOOK_MS, not `maxMs`: the
 * changes come by inotify, and that look is only for what no folder tells (a process that died
 * without writing). In a 1,000-node start in netns mode, whose starts wait seconds each for their
 * SSH servers, looks every 50 ms were the largest part of the worker's CPU (BENCHMARKS.md §2).
 */
const WATCHED_LOOK_MS = 1_000;

export class FolderWatch {
  private readonly watchers = new Map<string, FSWatcher | null>();
  private changedSince = false;
  private wake: (() => void) | null = null;

  constructor(folders: readonly string[]) {
    for (const folder of folders) this.watchers.set(folder, null);
    this.attach();
  }

  /**
   * Resolves when something changed in a watched folder (or `nudge()` was called) since the last
   * call, or after `maxMs` while a folder is not watched yet, nor its parent (WATCHED_LOOK_MS once
   * all are).
   */
  async changed(maxMs: number): Promise<void> {
    if (this.attach() || this.changedSince) {
      this.changedSince = false;
      return;
    }
    // A folder not there yet is told too when its parent is watched: its creation is a change there.
    const allWatched = [...this.watchers].every(([folder, w]) => w !== null || this.watchers.get(dirname(folder)));
    let timer: NodeJS.Timeout | undefined;
    await new Promise<void>((resolve) => {
      this.wake = resolve;
      timer = setTimeout(resolve, allWatched ? Math.max(maxMs, WATCHED_LOOK_MS) : maxMs);
    });
    clearTimeout(timer);
    this.wake = null;
    this.changedSince = false;
  }

  /** Something the folders do not tell happened (a process ended): the wait returns now. */
  nudge(): void {
    this.changedSince = true;
    this.wake?.();
  }

  close(): void {
    for (const watcher of this.watchers.values()) watcher?.close();
    this.watchers.clear();
    this.wake?.();
  }

  /** Watches the folders not watched yet that can be now; true when one was. */
  private attach(): boolean {
    let attached = false;
    for (const [folder, watcher] of this.watchers) {
      if (watcher) continue;
      try {
        const w = watch(folder, { persistent: false }, () => {
          this.changedSince = true;
          this.wake?.();
        });
        // A folder removed under the watch (the job released) ends it: looked at by the caller's deadline.
        w.on('error', () => undefined);
        this.watchers.set(folder, w);
        attached = true;
      } catch {
        // Not there yet (or no inotify watch left): the caller's wait is bounded by maxMs.
      }
    }
    return attached;
  }
}
