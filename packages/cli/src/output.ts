/** Where a command writes: the process's streams, or a test's buffers. */
export interface Io {
  stdout(text: string): void;
  stderr(text: string): void;
}

/** The real process streams. */
export const processIo: Io = {
  stdout: (text) => void process.stdout.write(text),
  stderr: (text) => void process.stderr.write(text),
};

/** What a command produced: its exit code, one JSON document for `--json`, and text for people. */
export interface CommandOutput {
  exitCode: number;
  json: unknown;
  text: string;
}

/** Columns padded to their widest cell, two spaces apart; a header line first. */
export function renderTable(headers: readonly string[], rows: readonly (readonly string[])[]): string {
  const widths = headers.map((header, i) => Math.max(header.length, ...rows.map((row) => (row[i] ?? '').length)));
  const line = (cells: readonly string[]) =>
    cells
      .map((cell, i) => (i === cells.length - 1 ? cell : cell.padEnd(widths[i]!)))
      .join('  ')
      .trimEnd();
  return [line(headers), ...rows.map(line)].join('\n');
}

/** `key: value` lines with the keys aligned. */
export function renderFields(fields: readonly (readonly [string, string])[]): string {
  const width = Math.max(...fields.map(([key]) => key.length));
  return fields.map(([key, value]) => `${`${key}:`.padEnd(width + 2)}${value}`).join('\n');
}

/** An age for people: `450ms`, `45s`, `12m 5s`, `3h 20m`, `2d 4h`; `-` for none. */
export function formatAge(ms: number | null): string {
  if (ms === null) return '-';
  if (ms < 1_000) return `${ms}ms`;
  const s = Math.floor(ms / 1_000);
  if (s < 60) return `${s}s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m}m ${s % 60}s`;
  const h = Math.floor(m / 60);
  if (h < 24) return `${h}h ${m % 60}m`;
  return `${Math.floor(h / 24)}d ${h % 24}h`;
}

/** A timestamp as ISO 8601 (UTC), `-` for none. */
export function formatDate(date: Date | null): string {
  return date === null ? '-' : date.toISOString();
}

/** A nullable text cell. */
export function cell(value: string | number | null | undefined): string {
  return value === null || value === undefined || value === '' ? '-' : String(value);
}

/** One JSON document (Dates as ISO strings), pretty-printed, with a final newline. */
export function toJson(value: unknown): string {
  return `${JSON.stringify(value, null, 2)}\n`;
}
