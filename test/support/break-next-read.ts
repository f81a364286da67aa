/**
 * Makes the next read of `field` of `target` throw; later reads see its value again. For tests of
 * code that must survive a read that throws where nothing should (an adapter's settle path).
 */
export function breakNextRead(target: object, field: string): void {
  const value: unknown = (target as Record<string, unknown>)[field];
  Object.defineProperty(target, field, {
    configurable: true,
    enumerable: true,
    get() {
      Object.defineProperty(target, field, { value, configurable: true, enumerable: true, writable: true });
      throw new Error(`reading ${field} boom`);
    },
  });
}
