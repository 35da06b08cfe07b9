#include "tools/common/run_main.hpp"

#include <shmbus/errors.hpp>

#include <exception>
#include <stdexcept>

#include "tools/common/failure.hpp"

namespace shmbus::tools {

int run_main(const CLI::App& app, const ErrorSink& sink, const std::function<int()>& body,
             const std::function<std::string()>& context) {
  const auto in_context = [&](const char* what) {
    const std::string where = context ? context() : std::string();
    return where.empty() ? std::string(what) : where + ": " + what;
  };
  try {
    return body();
  } catch (const CLI::ParseError& e) {
    return cli_exit(app, e, sink);
  } catch (const Failure& f) {
    sink.report(f.what(), f.code());
    return f.exit_code();
  } catch (const Error& e) {
    sink.report(e.what(), errc_name(e.errc()));
    return exit_code_for(e.errc());
  } catch (const std::invalid_argument& e) {
    sink.report(in_context(e.what()), "usage");
    return exit_usage;
  } catch (const std::exception& e) {
    sink.report(in_context(e.what()), "error");
    return exit_failure;
  }
}

}  // namespace shmbus::tools
