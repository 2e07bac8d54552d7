// runInChild: what a forked child's work returns comes back whole; a child that crashes, exits
// or throws is reported with how it ended, and this process goes on.

#include "mk/Target/ChildProcess.h"

#include <catch2/catch.hpp>

#include <csignal>
#include <cstdlib>
#include <stdexcept>
#include <string>

using mkc::ChildOutcome;
using mkc::runInChild;

TEST_CASE("a child's output comes back whole, binary and larger than a pipe holds", "[child]") {
  std::string expected(8 << 20, '\0');
  for (std::size_t i = 0; i < expected.size(); ++i)
    expected[i] = static_cast<char>(i * 7919 % 256);
  const ChildOutcome outcome = runInChild([&] { return expected; });
  REQUIRE(outcome.status == ChildOutcome::Status::Returned);
  CHECK(outcome.output == expected);
  const ChildOutcome empty = runInChild([] { return std::string(); });
  CHECK(empty.status == ChildOutcome::Status::Returned);
  CHECK(empty.output.empty());
}

TEST_CASE("a child's work runs in the child, not here", "[child]") {
  int touched = 0;
  const ChildOutcome outcome = runInChild([&] {
    touched = 1;
    return std::to_string(touched);
  });
  CHECK(outcome.output == "1");
  CHECK(touched == 0);
}

TEST_CASE("a child that crashes, exits or throws is reported with how it ended", "[child]") {
  const ChildOutcome crashed = runInChild([]() -> std::string {
    std::raise(SIGSEGV);
    return "unreachable";
  });
  CHECK(crashed.status == ChildOutcome::Status::Died);
  CHECK(crashed.reason == "signal 11 (Segmentation fault)");
  CHECK(crashed.output.empty());

  const ChildOutcome exited = runInChild([]() -> std::string { std::_Exit(3); });
  CHECK(exited.status == ChildOutcome::Status::Died);
  CHECK(exited.reason == "exit status 3");

  const ChildOutcome threw = runInChild([]() -> std::string { throw std::runtime_error("no"); });
  CHECK(threw.status == ChildOutcome::Status::Died);
  CHECK(threw.reason == "exit status 1");
}
