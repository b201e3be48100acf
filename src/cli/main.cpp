// xstage: measure the X-Stage, predict its back-pressure, and say what to do about it.
#include "cli/run.hpp"

int main(int argc, char** argv) { return xstage::cli::run(argc, argv); }
