// Power's public error type: Status and Result<T> (see base/status.h for the full contract).
//
// Every fallible call of the embedded API returns a Status or Result<T> and never aborts or
// throws. The codes a runtime caller meets: kInvalidArgument (bad request), kNotFound (model
// file), kDoesNotFit (the request can never fit the device budget or the context; the numbers
// are in context()), kQueueFull (the waiting queue is at its bound), kDeadlineExceeded (it did
// not fit before its deadline), kCancelled, kCorrupt / kUnsupported (the model file).
// Thread-safety: values.
#pragma once

#include "base/status.h"  // IWYU pragma: export
