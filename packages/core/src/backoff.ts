/** Exponential backoff settings. */
export interface BackoffOptions {
  /** Delay cap for the first retry, in ms. Default 1000. */
  baseDelayMs?: number;
  /** Upper bound of any delay, in ms. Default 300000 (5 minutes). */
  maxDelayMs?: number;
  /**
   * `'full'` (default): uniform in [0, cap], the AWS "full jitter" scheme that spreads retries of
   * many consumers apart. `'equal'`: uniform in [cap/2, cap]. `'none'`: exactly the cap.
   */
  jitter?: 'full' | 'equal' | 'none';
}

/** The delay before retry number `attempt` (1 = first retry): min(max, base * 2^(attempt-1)), jittered. */
export function backoffDelay(attempt: number, options: BackoffOptions = {}, random: () => number = Math.random): number {
  const base = options.baseDelayMs ?? 1000;
  const max = options.maxDelayMs ?? 300_000;
  const exponent = Math.max(0, Math.min(attempt - 1, 30));
  const cap = Math.min(max, base * 2 ** exponent);
  switch (options.jitter ?? 'full') {
    case 'none':
      return Math.round(cap);
    case 'equal':
      return Math.round(cap / 2 + random() * (cap / 2));
    case 'full':
      return Math.round(random() * cap);
  }
}

/** Resolves after `ms` milliseconds. */
export function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
