// The `xstage` command line as a function: parses argv, runs the command, prints any error, and returns the exit
// status (0; 1 a program error; 2 bad input; 3 the machine cannot run it). main.cpp is only a call to it.
#pragma once

namespace xstage::cli {

int run(int argc, char** argv);

}  // namespace xstage::cli
