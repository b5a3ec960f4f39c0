// The scenarios with harvest started directly, and the SDK version this run loaded.
import { it } from 'node:test';
import assert from 'node:assert/strict';
import { defineSuite } from './suite.js';
import { sdkVersion } from './helpers.js';

it('runs against the SDK version this run pins', () => {
  // STRANDS_SDK_EXPECT is set by test/run.sh for each pinned version.
  assert.equal(sdkVersion(), process.env.STRANDS_SDK_EXPECT ?? sdkVersion());
});

defineSuite('direct', undefined);
