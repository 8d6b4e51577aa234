/* hoop-run's command line: the options, their checks and the usage text. */
#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hoop-run.h"

enum {
  DEFAULT_GRACE_MS = 3000,
  MAX_GRACE_MS = 24 * 3600 * 1000,
};

static const double MAX_TIMEOUT_S = 1e9;

static const char USAGE[] =
    "Usage: hoop-run -n N [options] [--] program [args...]\n"
    "\n"
    "Start N ranks of a hoop job on this machine.\n"
    "\n"
    "Options:\n"
    "  -n N                   number of ranks, 1 to 1024\n"
    "  --root-addr HOST:PORT  where rank 0 listens (default: $HOOP_ROOT_ADDR\n"
    "                         if set, else 127.0.0.1 and a free port)\n"
    "  --no-prefix            pass the ranks' output through untouched\n"
    "                         (the default with one rank); otherwise each\n"
    "                         line is labelled \"[rank] \"\n"
    "  --grace-ms MS          time stopping ranks get before SIGKILL\n"
    "                         (default 3000)\n"
    "  --timeout SECONDS      stop the job if it runs longer than this\n"
    "  --netns PREFIX         run rank r in network namespace PREFIX-h<r>\n"
    "                         (/var/run/netns/PREFIX-h<r>, as made by\n"
    "                         tools/netsim.sh; needs root); rank 0 then\n"
    "                         listens at 10.99.0.1 and the ranks get\n"
    "                         HOOP_SOCKET_IFNAME=eth0 unless it is set\n"
    "  --ranks-per-host K     with --netns: K consecutive ranks share each\n"
    "                         namespace (rank r in PREFIX-h<r/K>), as\n"
    "                         ranks on one host do (default 1)\n"
    "  --cyclic               with --ranks-per-host: deal the ranks out\n"
    "                         over the hosts in turn instead (rank r in\n"
    "                         PREFIX-h<r % hosts>), as srun's cyclic\n"
    "                         distribution and mpirun --map-by node do\n"
    "  --elastic              a rank that fails stops no other: for jobs\n"
    "                         that go on without lost ranks (hoop-train\n"
    "                         --elastic, hoop_comm_shrink); sets\n"
    "                         HOOP_ELASTIC=1, so that the ranks also form\n"
    "                         without one that dies before they meet\n"
    "  --respawn N            with --elastic: start a replacement for each\n"
    "                         rank that fails, N in all; it gets the failed\n"
    "                         rank's variables and HOOP_JOIN=1, and joins\n"
    "                         the running job (hoop_comm_join); one still\n"
    "                         running 5 s after the other ranks finished\n"
    "                         is stopped\n"
    "  -h, --help             show this help\n"
    "\n"
    "Each rank gets HOOP_RANK, HOOP_WORLD_SIZE, HOOP_LOCAL_RANK,\n"
    "HOOP_LOCAL_WORLD_SIZE and HOOP_ROOT_ADDR in its environment, a new\n"
    "random HOOP_AUTH_TOKEN unless HOOP_AUTH_TOKEN or HOOP_AUTH_TOKEN_FILE\n"
    "is set, and with labels HOOP_STDERR_TTY=1 if hoop-run's stderr is a\n"
    "terminal.  Text a rank ends with a carriage return alone (a progress\n"
    "bar) is shown in place on a terminal's last line, under the other\n"
    "lines; a file gets only such text that a newline ends.\n"
    "SIGINT, SIGTERM and SIGHUP are passed on to the ranks.  Shared memory\n"
    "segments a dead rank left in /dev/shm (hoop-PID-*) are removed.\n"
    "\n"
    "Exit status: 0 if every rank succeeds (with --elastic, if one does),\n"
    "else that of the first rank to fail (128+N if killed by signal N), or\n"
    "128+N after receiving signal N;\n"
    "124 on timeout, 125 if hoop-run itself fails, 127 if the program cannot\n"
    "be run, 2 on bad usage.\n";

__attribute__((format(printf, 1, 2)))
static _Noreturn void usage_error(const char *fmt, ...)
{
  va_list ap;

  va_start(ap, fmt);
  vnotice(fmt, ap);
  va_end(ap);
  fputs("Try 'hoop-run --help' for more information.\n", stderr);
  exit(EXIT_USAGE);
}

static bool parse_long(const char *text, long min, long max, long *value)
{
  char *end;

  errno = 0;
  long v = strtol(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0' || v < min || v > max)
    return false;
  *value = v;
  return true;
}

static int64_t parse_timeout_ms(const char *text)
{
  char *end;

  errno = 0;
  double seconds = strtod(text, &end);
  /* Written so that NaN fails too. */
  if (errno != 0 || end == text || *end != '\0' ||
      !(seconds > 0 && seconds <= MAX_TIMEOUT_S))
    usage_error("--timeout wants a positive number of seconds, not '%s'",
                text);
  int64_t ms = (int64_t)(seconds * 1000);
  return ms > 0 ? ms : 1;
}

static bool valid_root_addr(const char *addr)
{
  const char *colon = strrchr(addr, ':');
  long port;

  return colon != NULL && colon != addr &&
         parse_long(colon + 1, 1, 65535, &port);
}

enum {
  OPT_ROOT_ADDR = 256,
  OPT_NO_PREFIX,
  OPT_GRACE_MS,
  OPT_TIMEOUT,
  OPT_NETNS,
  OPT_PER_HOST,
  OPT_CYCLIC,
  OPT_ELASTIC,
  OPT_RESPAWN
};

static const struct option LONG_OPTIONS[] = {
    {"help", no_argument, NULL, 'h'},
    {"root-addr", required_argument, NULL, OPT_ROOT_ADDR},
    {"no-prefix", no_argument, NULL, OPT_NO_PREFIX},
    {"grace-ms", required_argument, NULL, OPT_GRACE_MS},
    {"timeout", required_argument, NULL, OPT_TIMEOUT},
    {"netns", required_argument, NULL, OPT_NETNS},
    {"ranks-per-host", required_argument, NULL, OPT_PER_HOST},
    {"cyclic", no_argument, NULL, OPT_CYCLIC},
    {"elastic", no_argument, NULL, OPT_ELASTIC},
    {"respawn", required_argument, NULL, OPT_RESPAWN},
    {NULL, 0, NULL, 0},
};

static _Noreturn void bad_option(int c, char **argv)
{
  if (c == ':')
    usage_error("option '%s' needs a value", argv[optind - 1]);
  /* An unknown short option is in optopt; a bad long one is only in argv
     (optopt then holds its value, or 'h' for a misused --help). */
  if (optopt > 0 && optopt < OPT_ROOT_ADDR && optopt != 'h')
    usage_error("unknown option '-%c'", optopt);
  usage_error("bad option '%s'", argv[optind - 1]);
}

void parse_options(int argc, char **argv, struct options *opt)
{
  bool no_prefix = false;
  long value;
  int c;

  *opt = (struct options){.grace_ms = DEFAULT_GRACE_MS, .per_host = 1};
  opterr = 0; /* we report bad options ourselves, in our own words */
  /* '+' stops at the program's name and leaves its options alone. */
  while ((c = getopt_long(argc, argv, "+:hn:", LONG_OPTIONS, NULL)) != -1) {
    switch (c) {
    case 'h':
      fputs(USAGE, stdout);
      exit(EXIT_SUCCESS);
    case 'n':
      if (!parse_long(optarg, 1, MAX_RANKS, &value))
        usage_error("-n wants a number of ranks from 1 to %d, not '%s'",
                    MAX_RANKS, optarg);
      opt->nranks = (int)value;
      break;
    case OPT_ROOT_ADDR:
      if (!valid_root_addr(optarg))
        usage_error("--root-addr wants HOST:PORT, not '%s'", optarg);
      opt->root_addr = optarg;
      break;
    case OPT_NO_PREFIX:
      no_prefix = true;
      break;
    case OPT_GRACE_MS:
      if (!parse_long(optarg, 0, MAX_GRACE_MS, &value))
        usage_error("--grace-ms wants milliseconds from 0 to %d, not '%s'",
                    MAX_GRACE_MS, optarg);
      opt->grace_ms = value;
      break;
    case OPT_TIMEOUT:
      opt->timeout_ms = parse_timeout_ms(optarg);
      break;
    case OPT_NETNS:
      if (optarg[0] == '\0' || strchr(optarg, '/') != NULL)
        usage_error("--netns wants a namespace name prefix, not '%s'",
                    optarg);
      opt->netns = optarg;
      break;
    case OPT_PER_HOST:
      if (!parse_long(optarg, 1, MAX_RANKS, &value))
        usage_error("--ranks-per-host wants a number from 1 to %d, not '%s'",
                    MAX_RANKS, optarg);
      opt->per_host = (int)value;
      break;
    case OPT_CYCLIC:
      opt->cyclic = true;
      break;
    case OPT_ELASTIC:
      opt->elastic = true;
      break;
    case OPT_RESPAWN:
      if (!parse_long(optarg, 0, MAX_RANKS, &value))
        usage_error("--respawn wants a number of replacements from 0 to %d, "
                    "not '%s'",
                    MAX_RANKS, optarg);
      opt->respawn = (int)value;
      break;
    default:
      bad_option(c, argv);
    }
  }
  if (opt->nranks == 0)
    usage_error("missing -n N, the number of ranks");
  if (opt->per_host > 1 && opt->netns == NULL)
    usage_error("--ranks-per-host needs --netns: without namespaces every "
                "rank shares this host already");
  if (opt->respawn > 0 && !opt->elastic)
    usage_error("--respawn needs --elastic: without it a failed rank stops "
                "the job");
  if (opt->cyclic && opt->per_host == 1)
    usage_error("--cyclic needs --ranks-per-host K above 1: with one rank "
                "per host every placement is the same");
  if (optind >= argc)
    usage_error("missing the program to run");
  opt->argv = argv + optind;
  opt->prefix = opt->nranks > 1 && !no_prefix;
}
