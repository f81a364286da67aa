import { conformanceSuite } from '../../../test/conformance/suite.js';
import { createHarness } from '../test/harness.js';

conformanceSuite('kafka', () => createHarness());
