// `npm ci`'s prepare step: builds the client package and dist/ as the test tiers' setup does
// (harness/build.ts), noting its inputs' digests, so the first tier finds both built.
import { buildClient, buildServer } from '../harness/build.js';

buildClient();
buildServer();
