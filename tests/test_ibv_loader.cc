// libibverbs loaded at first use (transport/ibv_loader.h) instead of linked:
// the loader's table on this host's library, its refusals naming what is
// missing, no program loading it unless a rank looks for RDMA devices,
// and, where the library cannot be loaded, hoop-info and tcp/shm jobs
// running as before while HOOP_TRANSPORT=ib fails naming the library.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <link.h>

#include <climits>
#include <cstdlib>
#include <cstring>
#include <string>

#include "harness.h"

extern "C" {
#include "transport/ibv_loader.h"
}

namespace {

TEST(IbvLoader, FindsEveryFunctionInThisHostsLibrary) {
  hoop_ibv ibv;
  char why[512] = "";
  bool ok = hoop__ibv_load(HOOP_IBV_SONAME, &ibv, why, sizeof why);
  if (!ok && strstr(why, " could not be loaded: ") != nullptr)
    GTEST_SKIP() << "this host has no libibverbs: " << why;
  ASSERT_TRUE(ok) << why;
  // The struct is pointers only: each must have been filled.
  void *slots[sizeof ibv / sizeof(void *)];
  memcpy(slots, &ibv, sizeof slots);
  for (size_t i = 0; i < sizeof slots / sizeof slots[0]; i++)
    EXPECT_NE(slots[i], nullptr) << "entry " << i;
  // The versioned names resolve to what the dynamic linker binds a
  // program linked with libibverbs to.
  void *lib = dlopen(HOOP_IBV_SONAME, RTLD_NOW | RTLD_NOLOAD);
  ASSERT_NE(lib, nullptr) << dlerror();
  EXPECT_EQ(reinterpret_cast<void *>(ibv.get_device_list),
            dlsym(lib, "ibv_get_device_list"));
  EXPECT_EQ(reinterpret_cast<void *>(ibv.reg_mr), dlsym(lib, "ibv_reg_mr"));
  dlclose(lib);
}

TEST(IbvLoader, AMissingLibraryIsNamedWithTheLoadersReason) {
  hoop_ibv ibv;
  memset(&ibv, 0xff, sizeof ibv);
  char why[512] = "";
  EXPECT_FALSE(hoop__ibv_load("libhoop-test-absent.so.1", &ibv, why,
                              sizeof why));
  EXPECT_STREQ(why, "libhoop-test-absent.so.1 could not be loaded: "
                    "libhoop-test-absent.so.1: cannot open shared object "
                    "file: No such file or directory");
  hoop_ibv zero;
  memset(&zero, 0, sizeof zero);
  EXPECT_EQ(memcmp(&ibv, &zero, sizeof ibv), 0) << "the table was not cleared";
}

// A library that loads but lacks the functions: the first one is named
// with its version, and the table is left empty.
TEST(IbvLoader, ALibraryWithoutTheFunctionsIsRefusedNamingTheFirst) {
  hoop_ibv ibv;
  char why[512] = "";
  EXPECT_FALSE(hoop__ibv_load("libc.so.6", &ibv, why, sizeof why));
  EXPECT_EQ(std::string(why).rfind(
                "libc.so.6 has no ibv_get_device_list@IBVERBS_1.1, which "
                "hoop calls",
                0),
            0u)
      << why;
  EXPECT_EQ(ibv.get_device_list, nullptr);
}

std::string example(const std::string &env) {
  return "env -u HOOP_TRANSPORT " + env + " " + HOOP_RUN_PATH + " -n 2 " +
         HOOP_EXAMPLE_PATH;
}

// A job that never looks for RDMA devices never loads libibverbs, and
// hoop-info, which looks, loads it with dlopen (where it is installed).
TEST(IbvLoader, OnlyARankThatLooksForDevicesLoadsTheLibrary) {
  hooptest::ShellOutput out =
      hooptest::run_shell(example("LD_DEBUG=files HOOP_TRANSPORT=tcp"));
  ASSERT_EQ(out.status, 0) << out.text;
  ASSERT_NE(out.text.find("file=libhoop.so.0"), std::string::npos)
      << "LD_DEBUG shows no library loads here:\n" << out.text;
  EXPECT_EQ(out.text.find("libibverbs"), std::string::npos) << out.text;
  void *lib = dlopen(HOOP_IBV_SONAME, RTLD_NOW);
  if (lib == nullptr)
    GTEST_SKIP() << "this host has no libibverbs: " << dlerror();
  dlclose(lib);
  out = hooptest::run_shell(
      std::string("env -u HOOP_TRANSPORT LD_DEBUG=files ") + HOOP_RUN_PATH +
      " -n 1 " + HOOP_INFO_PATH);
  ASSERT_EQ(out.status, 0) << out.text;
  EXPECT_NE(out.text.find("file=" HOOP_IBV_SONAME " [0];  dynamically "
                          "loaded by"),
            std::string::npos)
      << out.text;
}

// Runs `cmd` with libibverbs.so.1 unloadable: as it is where the host has
// none, else with the library's file hidden under /dev/null in a mount
// namespace of its own.  Sets *skip, saying why, where that cannot be
// done (no unshare, or not allowed to mount).
hooptest::ShellOutput without_verbs(const std::string &cmd,
                                    std::string *skip) {
  void *lib = dlopen(HOOP_IBV_SONAME, RTLD_NOW);
  if (lib == nullptr)
    return hooptest::run_shell(cmd);
  link_map *map = nullptr;
  char path[PATH_MAX] = "";
  bool found = dlinfo(lib, RTLD_DI_LINKMAP, &map) == 0 &&
               realpath(map->l_name, path) != nullptr;
  dlclose(lib);
  if (!found) {
    *skip = std::string("cannot tell where ") + HOOP_IBV_SONAME + " is";
    return {};
  }
  std::string hide = std::string("unshare -m sh -c 'mount --bind /dev/null ") +
                     path + " && exec sh -c \"$1\"' sh '";
  hooptest::ShellOutput probe = hooptest::run_shell(hide + "true'");
  if (probe.status != 0) {
    while (!probe.text.empty() && probe.text.back() == '\n')
      probe.text.pop_back();
    *skip = "cannot hide " + std::string(path) +
            " in a mount namespace here: " + probe.text;
    return {};
  }
  return hooptest::run_shell(hide + cmd + "'");
}

TEST(IbvLoader, WithoutTheLibraryHoopInfoSaysWhyAndTcpJobsRun) {
  std::string skip;
  hooptest::ShellOutput out = without_verbs(
      std::string("env -u HOOP_TRANSPORT ") + HOOP_RUN_PATH + " -n 2 " +
          HOOP_INFO_PATH,
      &skip);
  if (!skip.empty())
    GTEST_SKIP() << skip;
  ASSERT_EQ(out.status, 0) << out.text;
  EXPECT_NE(out.text.find("# no RDMA devices: " HOOP_IBV_SONAME
                          " could not be loaded: "),
            std::string::npos)
      << out.text;
  for (const char *env : {"HOOP_TRANSPORT=tcp", ""}) {
    out = without_verbs(example(env), &skip);
    EXPECT_EQ(out.status, 0) << env << ": " << out.text;
    EXPECT_NE(out.text.find("rank 1 of 2: grad[0] = 3 (correct)"),
              std::string::npos)
        << env << ": " << out.text;
  }
}

TEST(IbvLoader, WithoutTheLibraryHoopTransportIbFailsNamingIt) {
  std::string skip;
  hooptest::ShellOutput out =
      without_verbs(example("HOOP_TRANSPORT=ib"), &skip);
  if (!skip.empty())
    GTEST_SKIP() << skip;
  // hoop-run stops the other rank once one has failed, so only the first
  // to fail is sure to have said why.
  EXPECT_NE(out.status, 0) << out.text;
  EXPECT_NE(out.text.find("HOOP_TRANSPORT=ib cannot join rank "),
            std::string::npos)
      << out.text;
  EXPECT_NE(out.text.find("has no RDMA device: " HOOP_IBV_SONAME
                          " could not be loaded: "),
            std::string::npos)
      << out.text;
}

}  // namespace
