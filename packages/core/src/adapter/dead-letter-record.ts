import { describeError } from '../error-text.js';
import { InboxError, InboxErrorCodes } from '../errors.js';
import type { AnyInboxProcessor, InboxOutcome } from '../types.js';

/**
 * Records a dead-letter decision through the processor (`processor.recordDeadLetter`) before the
 * adapter sends the copy anywhere. Resolves to `undefined` when it was recorded (or the processor
 * records nothing: a hand-built one without the method), or to a `DEAD_LETTER_NOT_RECORDED` error:
 * then the adapter must not dead-letter the delivery but let it come back, exactly as when the
 * copy could not be published, so every dead-letter is on record in the database.
 */
export async function recordDeadLetterOf(
  processor: AnyInboxProcessor,
  outcome: InboxOutcome,
  place: { destination: string; source?: string | undefined },
): Promise<InboxError | undefined> {
  if (processor.recordDeadLetter === undefined) return undefined;
  try {
    await processor.recordDeadLetter(outcome, place);
    return undefined;
  } catch (cause) {
    return new InboxError(
      InboxErrorCodes.DEAD_LETTER_NOT_RECORDED,
      `the dead-letter could not be recorded in the database, so it was not sent to ${place.destination}; the delivery comes back: ${describeError(cause)}`,
      { cause, messageIds: [outcome.messageId], details: { consumer: outcome.consumer, destination: place.destination } },
    );
  }
}
