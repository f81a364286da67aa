// String.prototype.isWellFormed/toWellFormed exist on every supported Node (20+), but TypeScript
// declares them only from lib ES2024, which would also admit APIs Node 20 lacks (Object.groupBy).
type WellFormedString = string & { isWellFormed(): boolean; toWellFormed(): string };

/** True when `text` has no lone surrogate, i.e. it survives UTF-8 encoding unchanged. */
export function isWellFormed(text: string): boolean {
  return (text as WellFormedString).isWellFormed();
}

/** `text` with every lone surrogate replaced by U+FFFD, as PostgreSQL would store it. */
export function toWellFormed(text: string): string {
  return (text as WellFormedString).toWellFormed();
}
