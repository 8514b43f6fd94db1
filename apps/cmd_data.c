/* apps/cmd_data.c - placeholder until the datasets module lands. */
#include "apps/commands.h"

int nf_cmd_data(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    return cli_usage_error("data", "not available in this build yet");
}
