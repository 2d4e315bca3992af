// Loaded by path (bundled into workflow code, required by workers and clients): failures'
// messages and stack traces go into the encoded attributes, which the payload codec encrypts.
const { DefaultFailureConverter } = require('@temporalio/common');

exports.failureConverter = new DefaultFailureConverter({ encodeCommonAttributes: true });
