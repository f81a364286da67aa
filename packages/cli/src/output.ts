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

/**
 * What a terminal could act on rather than print: C0 controls (ESC, BEL, CR, backspace, also newline
 * and tab), DEL, C1 controls (U+0080 to U+009F, CSI and OSC among them), the line and paragraph
 * separators, and the bidirectional embeddings, overrides and isolates that reorder what is shown.
 */
// biome-ignore lint/suspicious/noControlCharactersInRegex: these are exactly the characters to escape.
const UNSAFE = /[\u0000-\u001f\u007f-\u009f\u2028\u2029\u202a-\u202e\u2066-\u2069]/g;

/**
 * Stored text (message ids, error messages, destinations, consumer names) made safe to print for
 * people: every character of {@link UNSAFE} becomes a visible escape (`\x1b`, `\r`, `\n`, `\u202e`),
 * so hostile text can neither drive the operator's terminal (clear it, retitle it, overwrite a line)
 * nor break a table's rows. `--json` needs none of this: JSON escapes them itself.
 */
export function escapeText(text: string): string {
  return text.replace(UNSAFE, (char) => {
    const named = NAMED_ESCAPES[char];
    if (named !== undefined) return named;
    const code = char.charCodeAt(0);
    return code <= 0xff ? `\\x${code.toString(16).padStart(2, '0')}` : `\\u${code.toString(16).padStart(4, '0')}`;
  });
}

const NAMED_ESCAPES: Record<string, string> = { '\n': '\\n', '\r': '\\r', '\t': '\\t' };

/** Columns padded to their widest cell, two spaces apart; a header line first. Cells are printed through {@link escapeText}. */
export function renderTable(headers: readonly string[], rawRows: readonly (readonly string[])[]): string {
  const rows = rawRows.map((row) => row.map(escapeText));
  const widths = headers.map((header, i) => Math.max(header.length, ...rows.map((row) => (row[i] ?? '').length)));
  const line = (cells: readonly string[]) =>
    cells
      .map((cell, i) => (i === cells.length - 1 ? cell : cell.padEnd(widths[i]!)))
      .join('  ')
      .trimEnd();
  return [line(headers), ...rows.map(line)].join('\n');
}

/** `key: value` lines with the keys aligned; values are printed through {@link escapeText}, so each stays on its line. */
export function renderFields(fields: readonly (readonly [string, string])[]): string {
  const width = Math.max(...fields.map(([key]) => key.length));
  return fields.map(([key, value]) => `${`${key}:`.padEnd(width + 2)}${escapeText(value)}`).join('\n');
}

/** Many lines of text for people, each through {@link escapeText}: only the newlines between them stay. */
export function escapeLines(text: string): string {
  return text.split('\n').map(escapeText).join('\n');
}

/** A name or id quoted for a sentence (`"order-42"`): JSON's quoting, then {@link escapeText} for what JSON leaves raw (C1, U+2028, bidi). */
export function quote(text: string): string {
  return escapeText(JSON.stringify(text));
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
