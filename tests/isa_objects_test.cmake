# ctest: objects compiled for one ISA (-mavx2, -mavx512*) must not define symbols that other
# objects may define too (weak/vague-linkage: inline functions, template instances). The
# linker keeps one copy of such a symbol for the whole program: if it keeps the ISA object's
# copy, baseline code calls AVX code on any CPU; if it keeps the baseline copy, the ISA wrapper
# silently runs baseline code. Usage: cmake -DNM=nm -DOBJECTS="a.o;b.o" -P isa_objects_test.cmake
if(NOT NM OR NOT OBJECTS)
  message(FATAL_ERROR "isa_objects_test: NM and OBJECTS are required")
endif()
set(checked 0)
set(bad "")
foreach(obj IN LISTS OBJECTS)
  get_filename_component(name "${obj}" NAME)
  if(NOT name MATCHES "avx")
    continue()
  endif()
  math(EXPR checked "${checked} + 1")
  execute_process(COMMAND "${NM}" -C --defined-only "${obj}" OUTPUT_VARIABLE syms
                  RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "isa_objects_test: ${NM} failed on ${obj}")
  endif()
  string(REPLACE "\n" ";" lines "${syms}")
  foreach(line IN LISTS lines)
    # nm types: W/w weak, V/v weak object, u unique global (vague linkage). DW.ref.* is the
    # exception-handling personality pointer, the same data in every object, not code.
    if(line MATCHES "^[0-9a-f]* [WwVvu] " AND NOT line MATCHES " DW\\.ref\\.")
      string(APPEND bad "\n  ${name}: ${line}")
    endif()
  endforeach()
endforeach()
if(checked EQUAL 0)
  message(FATAL_ERROR "isa_objects_test: no ISA object among the given objects")
endif()
if(bad)
  message(FATAL_ERROR "ISA objects define symbols the linker may share with baseline code:${bad}")
endif()
message(STATUS "isa_objects_test: ${checked} ISA objects, no shared symbols")
