# ctest cmake.default_model_without_tests: a build configured with
# -DBITRANK_TESTS=OFF still compiles the default model's path into `bitrank`
# (else eval / compress / generate / tokenize say "no --model given and no
# default model was found"). Configures the sources into a scratch build
# directory (no compiling) and looks for BITRANK_DEFAULT_MODEL="<model>" in
# the compile command of the command's sources.
#   -DSOURCE_DIR=... -DSCRATCH_DIR=... -DEXPECTED_MODEL=... -DGENERATOR=...
if(EXPECTED_MODEL STREQUAL "")
  message("SKIP: no default model was found when this build was configured")
  return()
endif()
file(REMOVE_RECURSE "${SCRATCH_DIR}")
execute_process(
  COMMAND ${CMAKE_COMMAND} -S "${SOURCE_DIR}" -B "${SCRATCH_DIR}" -G "${GENERATOR}" -DBITRANK_TESTS=OFF
          -DBITRANK_FUZZ=OFF -DBITRANK_CUDA=OFF
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "configuring with -DBITRANK_TESTS=OFF failed:\n${out}\n${err}")
endif()
file(READ "${SCRATCH_DIR}/compile_commands.json" commands)
file(REMOVE_RECURSE "${SCRATCH_DIR}")
string(FIND "${commands}" "src/cli/inputs.cpp" at_inputs)
if(at_inputs EQUAL -1)
  message(FATAL_ERROR "src/cli/inputs.cpp is not in the compile commands of the BITRANK_TESTS=OFF build")
endif()
# The define is quoted and escaped twice (shell, JSON): compare without either.
string(REPLACE "\\" "" commands "${commands}")
string(REPLACE "\"" "" commands "${commands}")
string(FIND "${commands}" "BITRANK_DEFAULT_MODEL=${EXPECTED_MODEL} " at_define)
if(at_define EQUAL -1)
  message(FATAL_ERROR "with -DBITRANK_TESTS=OFF, bitrank is not compiled with BITRANK_DEFAULT_MODEL=\"${EXPECTED_MODEL}\"")
endif()
message("ok: BITRANK_TESTS=OFF compiles in BITRANK_DEFAULT_MODEL=\"${EXPECTED_MODEL}\"")
