/**
 * Tracks work in progress so `stop()` can wait for it, bounded. Adapters register each handler
 * call; `drain()` resolves when all finished, or reports what was still running at the deadline.
 */
export class InFlight {
  /** Each task with the number of deliveries it carries. */
  private readonly running = new Map<Promise<unknown>, number>();
  private deliveries = 0;

  /** Number of deliveries still running (a task tracked with `count` counts `count` times). */
  get size(): number {
    return this.deliveries;
  }

  /**
   * Registers `task`, carrying `count` deliveries (default 1), and returns it unchanged. A task
   * already tracked is not counted again. One task per batch keeps a batch of hundreds from costing
   * hundreds of promises, while `size` still counts deliveries.
   */
  track<T>(task: Promise<T>, count = 1): Promise<T> {
    if (this.running.has(task)) return task;
    this.running.set(task, count);
    this.deliveries += count;
    const forget = () => {
      this.deliveries -= this.running.get(task) ?? 0;
      this.running.delete(task);
    };
    task.then(forget, forget);
    return task;
  }

  /** Waits until nothing runs or `timeoutMs` passes. Returns how many deliveries were still running. */
  async drain(timeoutMs: number): Promise<number> {
    const deadline = Date.now() + timeoutMs;
    while (this.running.size > 0) {
      const left = deadline - Date.now();
      if (left <= 0) return this.deliveries;
      let timer: NodeJS.Timeout | undefined;
      await Promise.race([Promise.allSettled([...this.running.keys()]), new Promise((resolve) => (timer = setTimeout(resolve, left)))]);
      clearTimeout(timer);
    }
    return 0;
  }
}
