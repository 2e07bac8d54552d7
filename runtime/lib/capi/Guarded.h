//===- capi/Guarded.h - the C ABI's one mapping from exceptions to statuses -*- C++ -*-===//
//
// Internal to libmkc.so: every entry point of CApi.cpp runs its C++ counterpart through guarded(),
// which maps what it throws to an mkc_status (mkc.h) and this thread's last error
// (mkc_last_error()); nothing is thrown across the ABI. The job's own failures, a network that
// failed (net::NetworkError) and a kernel's wait that gave up (JobError), are
// MKC_ERROR_JOB_FAILED, not a wrong argument. In a header so that its test can throw each kind.
//
//   mkc_status mkc_barrier(mkc_runtime *runtime) {
//     return guarded(__func__, [&] { required(runtime, "runtime").runtime->barrier(); });
//   }
//
//===----------------------------------------------------------------------===//

#ifndef MK_RUNTIME_LIB_CAPI_GUARDED_H
#define MK_RUNTIME_LIB_CAPI_GUARDED_H

#include "mkc.h"

#include "mk/runtime/Runtime.h"
#include "mk/runtime/net/Transport.h"

#include <fmt/format.h>

#include <new>
#include <string>

namespace mkc::capi {

/// What mkc_last_error() returns: the last failure of this thread.
inline thread_local std::string lastError;

/// Runs `body`, mapping what it throws to a status and this thread's last error.
template <typename Body> mkc_status guarded(const char *function, Body &&body) {
  auto fail = [&](mkc_status status, const char *what) {
    lastError = fmt::format("{}: {}", function, what);
    return status;
  };
  try {
    body();
    return MKC_SUCCESS;
  } catch (const mkc::NoDeviceError &error) {
    return fail(MKC_ERROR_NO_DEVICE, error.what());
  } catch (const mkc::JobError &error) {
    return fail(MKC_ERROR_JOB_FAILED, error.what());
  } catch (const mkc::RuntimeError &error) {
    return fail(MKC_ERROR_INVALID_ARGUMENT, error.what());
  } catch (const mkc::net::NetworkError &error) {
    return fail(MKC_ERROR_JOB_FAILED, error.what());
  } catch (const mkc::JitError &error) {
    return fail(MKC_ERROR_COMPILE, error.what());
  } catch (const mkc::BootstrapError &error) {
    return fail(MKC_ERROR_BOOTSTRAP, error.what());
  } catch (const mkc::cuda::Error &error) {
    return fail(MKC_ERROR_CUDA, error.what());
  } catch (const std::bad_alloc &) {
    return fail(MKC_ERROR_INTERNAL, "out of host memory");
  } catch (const std::exception &error) {
    return fail(MKC_ERROR_INTERNAL, error.what());
  } catch (...) {
    return fail(MKC_ERROR_INTERNAL, "unknown exception");
  }
}

} // namespace mkc::capi

#endif // MK_RUNTIME_LIB_CAPI_GUARDED_H
