/**
 * A hold for a handler the test controls: the handler calls `entered()` and awaits `held`; the test
 * awaits `inside` (the handler got there) and calls `release()` when it has done what it needed to.
 */
export function gate(): { held: Promise<void>; release: () => void; inside: Promise<void>; entered: () => void } {
  let release!: () => void;
  const held = new Promise<void>((resolve) => {
    release = resolve;
  });
  let entered!: () => void;
  const inside = new Promise<void>((resolve) => {
    entered = resolve;
  });
  return { held, release, inside, entered };
}
