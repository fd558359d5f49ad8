# ctest cmake.gitignore_outputs: what `bitrank compress` writes where it runs
# (the model, its checkpoint, step log and loss curve) is ignored by git, in
# the repository root and below it; the loss curves kept in docs/runs/ are not.
#   -DSOURCE_DIR=...
find_program(GIT git)
if(NOT GIT OR NOT EXISTS "${SOURCE_DIR}/.git")
  message("SKIP: not a git checkout")
  return()
endif()
foreach(path m.1bpw.bitrank m.1bpw.bitrank.ckpt m.1bpw.bitrank.steps.jsonl m.1bpw.bitrank.loss.svg m.1bpw.bitrank.teacher.ids
             runs/m.e2e.bitrank runs/m.e2e.bitrank.loss.svg)
  execute_process(COMMAND ${GIT} -C "${SOURCE_DIR}" check-ignore -q --no-index "${path}" RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "git does not ignore ${path} (.gitignore)")
  endif()
endforeach()
execute_process(COMMAND ${GIT} -C "${SOURCE_DIR}" check-ignore -q --no-index docs/runs/new_run.loss.svg RESULT_VARIABLE rc)
if(rc EQUAL 0)
  message(FATAL_ERROR "git ignores docs/runs/new_run.loss.svg: the curves in docs/runs/ are kept")
endif()
message("ok: compress outputs are ignored, docs/runs/*.loss.svg is not")
