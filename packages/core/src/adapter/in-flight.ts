/**
 * Tracks work in progress so `stop()` can wait for it, bounded. Adapters register each handler
 * call; `drain()` resolves when all finished, or reports what was still running at the deadline.
 */
export class InFlight {
  private readonly running = new Set<Promise<unknown>>();

  /** Number of tasks still running. */
  get size(): number {
    return this.running.size;
  }

  /** Registers `task` and returns it unchanged. */
  track<T>(task: Promise<T>): Promise<T> {
    this.running.add(task);
    const forget = () => this.running.delete(task);
    task.then(forget, forget);
    return task;
  }

  /** Waits until nothing runs or `timeoutMs` passes. Returns how many tasks were still running. */
  async drain(timeoutMs: number): Promise<number> {
    const deadline = Date.now() + timeoutMs;
    while (this.running.size > 0) {
      const left = deadline - Date.now();
      if (left <= 0) return this.running.size;
      let timer: NodeJS.Timeout | undefined;
      await Promise.race([Promise.allSettled([...this.running]), new Promise((resolve) => (timer = setTimeout(resolve, left)))]);
      clearTimeout(timer);
    }
    return 0;
  }
}
