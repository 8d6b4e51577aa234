// README.md kept true.  Every command of its ```sh blocks is either run
// here (runs(), in README order, since later commands use what earlier ones
// made) or listed in elsewhere() with the file that runs it; a command that
// is neither fails, and so does a listed command the README no longer
// shows, so neither list can rot.  The user documents' relative
// links must name files that exist, and the README's environment table must
// name every HOOP_ variable the code reads, and no other.
#include <gtest/gtest.h>

#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "harness.h"

namespace {

namespace fs = std::filesystem;

const fs::path kSource = HOOP_SOURCE_DIR;
const fs::path kBuild = HOOP_BUILD_DIR;

// A command run here: the regexes its output must match, and a program
// it needs, without which it is reported as not run instead of failing;
// likewise when it needs a part this build lacks (`built` false).
struct RunHere {
  std::string command;
  std::vector<std::string> expect;
  std::string needs;
  bool built = true;
};

// A command too slow or too demanding to run here (it installs packages,
// builds the tree, needs torch): `file` must contain each of `words`
// outside its comments, so the listing is checked, not trusted.
struct Elsewhere {
  std::string command;
  std::string file;
  std::vector<std::string> words;
};

// What docs/examples/allreduce.c prints on each rank when the sum is right.
std::vector<std::string> ranks_correct(int nranks) {
  std::vector<std::string> lines;
  int sum = nranks * (nranks + 1) / 2;
  for (int r = 0; r < nranks; r++)
    lines.push_back("rank " + std::to_string(r) + " of " +
                    std::to_string(nranks) + ": grad\\[0\\] = " +
                    std::to_string(sum) + " \\(correct\\)");
  return lines;
}

std::vector<std::string> plus(std::vector<std::string> a,
                              const std::vector<std::string> &b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

const std::vector<RunHere> &runs() {
  static const std::vector<RunHere> list = {
      {"build/tools/hoop-run -n 4 build/example-allreduce", ranks_correct(4),
       ""},
      {"cmake --install build --prefix ~/hoop",
       {"(Installing|Up-to-date): \\S*/hoop/include/hoop\\.h"},
       ""},
      {"cc -o allreduce docs/examples/allreduce.c -Wl,-rpath,$HOME/hoop/lib "
       "$(PKG_CONFIG_PATH=~/hoop/lib/pkgconfig pkg-config --cflags --libs "
       "hoop)",
       {}, // the next command runs what it built
       "pkg-config"},
      // Runs what the line before built, so it needs what that line needs.
      {"~/hoop/bin/hoop-run -n 2 ./allreduce", ranks_correct(2),
       "pkg-config"},
      {"build/tools/hoop-run -n 2 build/example-allreduce", ranks_correct(2),
       ""},
      {"mpirun -np 2 build/example-allreduce", ranks_correct(2), "mpirun"},
      // The torch backend's example: one epoch over the whole training
      // set, on two ranks.
      {"PYTHONPATH=build/python torchrun --standalone --nproc_per_node 2 "
       "--redirects 2 --tee 2 docs/examples/ddp_mnist.py --backend hoop "
       "--epochs 1",
       {"epoch 1: loss [0-9.]+, test accuracy 0\\.[0-9]+, [0-9]+ samples/s "
        "\\(hoop, 2 ranks\\)"},
       "torchrun", HOOP_TORCH_BACKEND != 0},
      {"HOOP_AUTH_TOKEN=$(od -vAn -N16 -tx1 /dev/urandom | tr -d ' \\n') "
       "torchrun --standalone --nproc_per_node 2 --no_python --redirects 2 "
       "--tee 2 build/example-allreduce",
       ranks_correct(2), "torchrun"},
      {"HOOP_ALGO=ps build/tools/hoop-run -n 2 build/bench/hoop-bench -b 4K "
       "-e 1M",
       {"\\bps\\b", "\\n\\[0\\] +1048576 +262144 +float +sum"},
       "", HOOP_BENCH_PATH[0] != '\0'},
      {"HOOP_DEBUG=INFO build/tools/hoop-run -n 2 build/example-allreduce",
       plus({"INFO rank 0 -> rank 1 .* via (shm|tcp)"}, ranks_correct(2)),
       ""},
      {"build/tools/hoop-run -n 2 build/tools/hoop-info",
       {"topology", "predicted all-reduce time"},
       ""},
      {"build/tools/hoop-sim --hosts 8 --ranks-per-host 8 -a all --sizes "
       "4K,1M",
       // AUTO's row at 1 MiB: the model picks the ring, the fastest.
       {"# auto: the cost model", "\\n +1M +ring +[0-9.]+ +ring "},
       ""},
  };
  return list;
}

const std::vector<Elsewhere> &elsewhere() {
  static const std::vector<Elsewhere> list = {
      {"tools/quickstart.sh demo", ".ci/run", {"tools/quickstart.sh demo"}},
      {"tools/quickstart.sh test", ".ci/run", {"tools/quickstart.sh test"}},
      {"cmake -S . -B build -G Ninja",
       "tools/quickstart.sh",
       {"cmake -S \"$root\" -B \"$build\" -G Ninja"}},
      {"cmake --build build",
       "tools/quickstart.sh",
       {"cmake --build \"$build\""}},
      {"python3 -m venv --system-site-packages ~/hoop-venv",
       "tests/torch/pip_install.sh",
       {"-m venv --system-site-packages"}},
      {"~/hoop-venv/bin/pip install --no-build-isolation ./python",
       "tests/torch/pip_install.sh",
       {"/bin/pip\" install", "--no-build-isolation \"$src/python\""}},
  };
  return list;
}

std::string slurp(const fs::path &path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string trim(const std::string &s) {
  size_t b = s.find_first_not_of(" \t");
  if (b == std::string::npos)
    return "";
  return s.substr(b, s.find_last_not_of(" \t") - b + 1);
}

// Runs of blanks as one, so that alignment of comments and continuation
// indents in the README do not matter to the lists above.
std::string squeeze(const std::string &s) {
  std::string out;
  for (char c : s) {
    bool blank = c == ' ' || c == '\t';
    if (!(blank && (out.empty() || out.back() == ' ')))
      out += blank ? ' ' : c;
  }
  return trim(out);
}

// A # that starts a word starts a comment (as the shell reads it, outside
// quotes, which the README's commands do not put # in).
std::string strip_comment(const std::string &line) {
  for (size_t i = 0; i < line.size(); i++)
    if (line[i] == '#' && (i == 0 || line[i - 1] == ' ' || line[i - 1] == '\t'))
      return line.substr(0, i);
  return line;
}

// The commands of a markdown text's ```sh blocks, one a line, a line that
// ends in \ joined with the next, in order of appearance.
std::vector<std::string> sh_commands(const std::string &markdown) {
  std::vector<std::string> commands;
  std::istringstream in(markdown);
  bool in_fence = false, in_sh = false;
  std::string pending;
  for (std::string line; std::getline(in, line);) {
    std::string t = trim(line);
    if (t.rfind("```", 0) == 0) {
      in_sh = !in_fence && t == "```sh";
      in_fence = !in_fence;
      continue;
    }
    if (!in_sh)
      continue;
    std::string code = trim(strip_comment(line));
    bool continues = !code.empty() && code.back() == '\\';
    if (continues)
      code.pop_back();
    pending += code + " ";
    if (continues)
      continue;
    std::string command = squeeze(pending);
    pending.clear();
    if (!command.empty())
      commands.push_back(command);
  }
  return commands;
}

std::vector<std::string> readme_commands() {
  return sh_commands(slurp(kSource / "README.md"));
}

bool in_readme(const std::string &command) {
  std::vector<std::string> all = readme_commands();
  return std::find(all.begin(), all.end(), command) != all.end();
}

const RunHere *find_run(const std::string &command) {
  for (const RunHere &r : runs())
    if (r.command == command)
      return &r;
  return nullptr;
}

const Elsewhere *find_elsewhere(const std::string &command) {
  for (const Elsewhere &e : elsewhere())
    if (e.command == command)
      return &e;
  return nullptr;
}

// A file's text without its comment lines (# in shell, // in C++), so a
// command named only in a comment does not count as run.
std::string code_lines(const fs::path &path) {
  std::istringstream in(slurp(path));
  std::string code;
  for (std::string line; std::getline(in, line);) {
    std::string t = trim(line);
    if (t.rfind("#", 0) != 0 && t.rfind("//", 0) != 0)
      code += line + "\n";
  }
  return code;
}

bool on_path(const std::string &program) {
  return system(("command -v " + program + " >/dev/null 2>&1").c_str()) == 0;
}

// A directory that looks like the source tree (each top-level entry a
// symbolic link to the real one) with build/ linked to this build, so that
// the README's build/... paths and docs/... paths resolve while what the
// commands write stays here.  HOME points here too, for ~/hoop.
class Scratch {
 public:
  Scratch() {
    const char *tmp = getenv("TMPDIR");
    std::string tmpl = std::string(tmp && *tmp ? tmp : "/tmp") +
                       "/hoop-readme-XXXXXX";
    if (mkdtemp(tmpl.data()) == nullptr)
      return;
    dir_ = tmpl;
    for (const fs::directory_entry &e : fs::directory_iterator(kSource))
      if (e.path().filename() != "build")
        fs::create_directory_symlink(e.path(), dir_ / e.path().filename());
    fs::create_directory_symlink(kBuild, dir_ / "build");
  }
  ~Scratch() {
    // remove_all takes the links away, never what they point at.
    if (!dir_.empty())
      fs::remove_all(dir_);
  }
  const fs::path &dir() const { return dir_; }

 private:
  fs::path dir_;
};

TEST(Readme, EveryCommandIsRunHereOrListedAsRunElsewhere) {
  for (const std::string &command : readme_commands())
    EXPECT_TRUE(find_run(command) != nullptr ||
                find_elsewhere(command) != nullptr)
        << "README.md shows `" << command
        << "`, which tests/test_readme.cc neither runs (runs()) nor lists "
           "as run elsewhere (elsewhere())";
}

TEST(Readme, EveryListedCommandIsStillInTheReadme) {
  for (const RunHere &r : runs())
    EXPECT_TRUE(in_readme(r.command))
        << "runs() has `" << r.command << "`, which README.md no longer shows";
  for (const Elsewhere &e : elsewhere())
    EXPECT_TRUE(in_readme(e.command))
        << "elsewhere() has `" << e.command
        << "`, which README.md no longer shows";
}

TEST(Readme, CommandsListedAsRunElsewhereAreRunThere) {
  for (const Elsewhere &e : elsewhere()) {
    ASSERT_TRUE(fs::exists(kSource / e.file))
        << e.file << ", said to run `" << e.command << "`, does not exist";
    std::string code = code_lines(kSource / e.file);
    for (const std::string &word : e.words)
      EXPECT_NE(code.find(word), std::string::npos)
          << e.file << " is said to run `" << e.command << "` but has no `"
          << word << "` outside its comments";
  }
}

TEST(Readme, CommandsRunAndPrintWhatTheReadmeSays) {
  Scratch scratch;
  ASSERT_FALSE(scratch.dir().empty()) << "mkdtemp failed";
  setenv("HOME", scratch.dir().c_str(), 1);
  // mpirun refuses root (CI runs as root) and more ranks than cores
  // unless told; the README's line should not need those flags.
  setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
  setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
  setenv("OMPI_MCA_rmaps_base_oversubscribe", "1", 1);
  std::set<std::string> done;
  std::vector<std::string> not_run;
  for (const std::string &command : readme_commands()) {
    const RunHere *r = find_run(command);
    if (r == nullptr || !done.insert(command).second)
      continue;
    if (!r->needs.empty() && !on_path(r->needs)) {
      not_run.push_back(command + " (no " + r->needs + ")");
      continue;
    }
    if (!r->built) {
      not_run.push_back(command + " (not in this build)");
      continue;
    }
    // A script file keeps the command's own quoting away from ours.
    fs::path script = scratch.dir() / "readme-command.sh";
    std::ofstream(script) << command << "\n";
    hooptest::ShellOutput out = hooptest::run_shell(
        "cd '" + scratch.dir().string() +
        "' && timeout -k 5 120 bash readme-command.sh");
    EXPECT_EQ(out.status, 0) << "README command `" << command << "`:\n"
                             << out.text;
    for (const std::string &re : r->expect)
      EXPECT_TRUE(std::regex_search(out.text, std::regex(re)))
          << "README command `" << command << "`: no match for /" << re
          << "/ in:\n"
          << out.text;
  }
  if (!not_run.empty()) {
    std::string list;
    for (const std::string &c : not_run)
      list += "\n  " + c;
    GTEST_SKIP() << "not run, for want of a program or a part:" << list;
  }
}

// Every [text](target) and ![alt](target) that is not a URL or an anchor
// of the same page.
std::vector<std::string> relative_links(const std::string &markdown) {
  static const std::regex link("\\]\\(([^)\\s]+)\\)");
  std::vector<std::string> targets;
  for (std::sregex_iterator it(markdown.begin(), markdown.end(), link), end;
       it != end; ++it) {
    std::string target = (*it)[1];
    if (target.find("://") != std::string::npos || target[0] == '#' ||
        target.rfind("mailto:", 0) == 0)
      continue;
    targets.push_back(target.substr(0, target.find('#')));
  }
  return targets;
}

TEST(Readme, RelativeLinksNameFilesThatExist) {
  for (const char *doc : {"README.md", "docs/performance.md",
                          "docs/training.md", "docs/api.md",
                          "docs/architecture.md", "docs/torch.md"}) {
    fs::path path = kSource / doc;
    ASSERT_TRUE(fs::exists(path)) << doc;
    std::vector<std::string> targets = relative_links(slurp(path));
    for (const std::string &target : targets)
      EXPECT_TRUE(fs::exists(path.parent_path() / target))
          << doc << " links " << target << ", which does not exist";
  }
  EXPECT_FALSE(relative_links(slurp(kSource / "README.md")).empty())
      << "no links found in README.md: the link pattern no longer matches";
}

// The source files of the library, its tools and the bench.
std::vector<fs::path> code_files() {
  static const std::set<std::string> code = {".c",   ".h",   ".cu",
                                             ".cpp", ".hpp", ".py"};
  std::vector<fs::path> files;
  for (const char *dir : {"src", "tools", "bench", "python"})
    for (const fs::directory_entry &e :
         fs::recursive_directory_iterator(kSource / dir))
      if (code.count(e.path().extension().string()) != 0)
        files.push_back(e.path());
  return files;
}

// The README's "## Environment" section, up to the next heading.
std::string environment_section() {
  std::string readme = slurp(kSource / "README.md");
  size_t begin = readme.find("\n## Environment\n");
  if (begin == std::string::npos)
    return "";
  size_t end = readme.find("\n## ", begin + 1);
  return readme.substr(begin, end == std::string::npos ? end : end - begin);
}

TEST(Readme, EnvironmentTableNamesEveryVariableTheCodeReads) {
  // A variable's name is read through getenv, the HOOP_PARAMS table, a
  // row of a table such as env.c's launchers, or a constant passed on
  // (comm.c's HOOP_SOCKET_IFNAME), so every string literal that is a
  // whole HOOP_ name counts, save these, which name no variable.
  static const std::set<std::string> not_variables = {
      "HOOP_RESULT_UNKNOWN", // hoop_result_name() of a value outside the enum
      // Initializers that messages about uninitialised structs name.
      "HOOP_MODEL_INIT", "HOOP_RANK_INFO_INIT", "HOOP_STATS_INIT",
  };
  static const std::regex literal("\"(HOOP_[A-Z0-9_]+)\"");
  std::set<std::string> names;
  for (const fs::path &file : code_files()) {
    std::string text = slurp(file);
    for (std::sregex_iterator it(text.begin(), text.end(), literal), end;
         it != end; ++it)
      if (not_variables.count((*it)[1]) == 0)
        names.insert((*it)[1]);
  }
  ASSERT_GE(names.size(), 15u) << "the patterns no longer find the tunables";
  std::string table = environment_section();
  ASSERT_FALSE(table.empty()) << "README.md has no ## Environment section";
  for (const std::string &name : names)
    EXPECT_NE(table.find("`" + name + "`"), std::string::npos)
        << name << " is read by the code but not in README.md's table";
}

TEST(Readme, EnvironmentTableNamesNoVariableTheCodeLacks) {
  std::string code;
  for (const fs::path &file : code_files())
    code += slurp(file);
  std::string table = environment_section();
  static const std::regex named("`(HOOP_[A-Z0-9_]+)`");
  int seen = 0;
  for (std::sregex_iterator it(table.begin(), table.end(), named), end;
       it != end; ++it, seen++)
    EXPECT_NE(code.find("\"" + (*it)[1].str() + "\""), std::string::npos)
        << "README.md's table names " << (*it)[1]
        << ", which no source file mentions";
  EXPECT_GT(seen, 0) << "no variables found in README.md's table";
}

} // namespace
