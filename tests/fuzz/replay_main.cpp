// Replays fuzz inputs without libFuzzer, so builds with any compiler (GCC,
// the sanitizer builds) run every target over its corpus:
//   TARGET-replay FILE_OR_DIR...
#include <dirent.h>
#include <sys/stat.h>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);

namespace {
int run_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "cannot read %s\n", path.c_str());
    return 1;
  }
  const std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  LLVMFuzzerTestOneInput(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size());
  return 0;
}
}  // namespace

int main(int argc, char** argv) {
  int inputs = 0, errors = 0;
  for (int i = 1; i < argc; ++i) {
    struct stat st {};
    if (::stat(argv[i], &st) != 0) {
      std::fprintf(stderr, "no such file or directory: %s\n", argv[i]);
      return 1;
    }
    if (!S_ISDIR(st.st_mode)) {
      errors += run_file(argv[i]);
      ++inputs;
      continue;
    }
    DIR* d = ::opendir(argv[i]);
    while (dirent* e = d ? ::readdir(d) : nullptr) {
      if (e->d_name[0] == '.') continue;
      errors += run_file(std::string(argv[i]) + "/" + e->d_name);
      ++inputs;
    }
    if (d) ::closedir(d);
  }
  std::fprintf(stderr, "%s: %d inputs replayed\n", argv[0], inputs);
  return errors == 0 && inputs > 0 ? 0 : 1;
}
