/**
 * True when testcontainers can reach a container runtime. The global setups use it to decide
 * whether a missing local service may fall back to a container; without one they fail.
 */
export async function dockerAvailable(): Promise<boolean> {
  try {
    const { getContainerRuntimeClient } = await import('testcontainers');
    await getContainerRuntimeClient();
    return true;
  } catch {
    return false;
  }
}
