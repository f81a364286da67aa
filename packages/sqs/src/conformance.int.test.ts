import { conformanceSuite } from '../../../test/conformance/suite.js';
import { createHarness } from '../test/harness.js';

// The promises every inboxed adapter keeps (test/conformance/suite.ts), against the SQS emulator.
conformanceSuite('sqs', () => createHarness());
