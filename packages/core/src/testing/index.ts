/**
 * Test helpers for users of inboxed: record outcomes and wait for a message to settle.
 *
 * @packageDocumentation
 */
export { createOutcomeRecorder, type OutcomeRecorder } from './outcome-recorder.js';
