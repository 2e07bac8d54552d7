// capi/Guarded.h: each kind of failure the runtime throws becomes its mkc_status, with the
// function's name and the message as the thread's last error. The job's own failures (a network
// that failed, a kernel's wait that gave up) are MKC_ERROR_JOB_FAILED, not a wrong argument.

#include "capi/Guarded.h"

#include <catch2/catch.hpp>

#include <new>
#include <stdexcept>
#include <string>

using Catch::Matchers::Equals;
using mkc::capi::guarded;
using mkc::capi::lastError;

namespace {

template <typename Exception> mkc_status statusOf(const Exception &exception) {
  return guarded("mkc_test", [&] { throw exception; });
}

} // namespace

TEST_CASE("capi: the job's failures are MKC_ERROR_JOB_FAILED") {
  CHECK(statusOf(mkc::JobError("a kernel gave up waiting")) == MKC_ERROR_JOB_FAILED);
  CHECK_THAT(lastError, Equals("mkc_test: a kernel gave up waiting"));
  CHECK(statusOf(mkc::net::NetworkError("proxy: node 1 is unreachable")) == MKC_ERROR_JOB_FAILED);
  CHECK_THAT(lastError, Equals("mkc_test: proxy: node 1 is unreachable"));
  CHECK_THAT(mkc_status_name(MKC_ERROR_JOB_FAILED), Equals("MKC_ERROR_JOB_FAILED"));
}

TEST_CASE("capi: every other kind of failure keeps its status") {
  CHECK(guarded("mkc_test", [] {}) == MKC_SUCCESS);
  CHECK(statusOf(mkc::RuntimeError("x is null")) == MKC_ERROR_INVALID_ARGUMENT);
  CHECK(statusOf(mkc::NoDeviceError("no GPU")) == MKC_ERROR_NO_DEVICE);
  CHECK(statusOf(mkc::JitError("does not compile")) == MKC_ERROR_COMPILE);
  CHECK(statusOf(mkc::BootstrapError("no rank 0")) == MKC_ERROR_BOOTSTRAP);
  CHECK(statusOf(mkc::cuda::Error(CUDA_ERROR_INVALID_VALUE, "cuMemAlloc")) == MKC_ERROR_CUDA);
  CHECK(statusOf(std::bad_alloc()) == MKC_ERROR_INTERNAL);
  CHECK_THAT(lastError, Equals("mkc_test: out of host memory"));
  CHECK(statusOf(std::logic_error("a bug")) == MKC_ERROR_INTERNAL);
  CHECK(statusOf(42) == MKC_ERROR_INTERNAL);
  CHECK_THAT(lastError, Equals("mkc_test: unknown exception"));
}
