/** `env[name]`, or a clear error naming who needed it: for worker processes configured by environment. */
export function requiredEnv(env: NodeJS.ProcessEnv, name: string, who: string): string {
  const value = env[name];
  if (value === undefined || value === '') throw new Error(`${who}: ${name} is not set`);
  return value;
}
