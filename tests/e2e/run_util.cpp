#include "run_util.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

#include "test_util.h"

extern char** environ;

namespace power::testing {

std::string power_binary() {
  return POWER_BINARY;
}

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::string stories(const std::string& name) {
  return shared_dir() + "/models/stories260K/" + name;
}

RunResult run_power(const std::vector<std::string>& args, const std::vector<std::string>& prefix) {
  RunResult r;
  std::string dir = make_temp_dir("power-run");
  std::string out_path = dir + "/out", err_path = dir + "/err";
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 1, out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&fa, 2, err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  std::vector<std::string> argv_s = prefix;
  argv_s.push_back(power_binary());
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  int rc = posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) {
    ADD_FAILURE() << "cannot spawn " << argv[0];
    remove_tree(dir);
    return r;
  }
  int status = 0;
  struct rusage usage {};
  wait4(pid, &status, 0, &usage);
  r.max_rss_kb = usage.ru_maxrss;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  auto out = read_bytes(out_path);
  auto err = read_bytes(err_path);
  r.out.assign(out.begin(), out.end());
  r.err.assign(err.begin(), err.end());
  remove_tree(dir);
  return r;
}

}  // namespace power::testing
