# sliced_protoc(TARGET t IMPORT_DIR dir OUT_DIR out [GRPC] PROTOS rel/path.proto ...
#               [INCLUDE_DIRS dir ...])
# Runs protoc on each proto (a path relative to IMPORT_DIR) and adds the
# generated C++ (and, with GRPC, the gRPC stubs) to target t. INCLUDE_DIRS are
# further import roots for what the protos import. Explicit custom
# commands, because CMake 3.25's protobuf_generate mis-derives output paths
# for protos outside the current source directory.
function(sliced_protoc)
  cmake_parse_arguments(ARG "GRPC" "TARGET;IMPORT_DIR;OUT_DIR" "PROTOS;INCLUDE_DIRS" ${ARGN})
  file(MAKE_DIRECTORY ${ARG_OUT_DIR})
  foreach(rel ${ARG_PROTOS})
    get_filename_component(dir ${rel} DIRECTORY)
    get_filename_component(name ${rel} NAME_WLE)
    set(base ${ARG_OUT_DIR}/${dir}/${name})
    set(outputs ${base}.pb.cc ${base}.pb.h)
    set(args --cpp_out=${ARG_OUT_DIR})
    if(ARG_GRPC)
      list(APPEND outputs ${base}.grpc.pb.cc ${base}.grpc.pb.h)
      list(APPEND args --grpc_out=${ARG_OUT_DIR}
           --plugin=protoc-gen-grpc=$<TARGET_FILE:gRPC::grpc_cpp_plugin>)
    endif()
    foreach(include ${ARG_INCLUDE_DIRS})
      list(APPEND args -I ${include})
    endforeach()
    add_custom_command(
      OUTPUT ${outputs}
      COMMAND protobuf::protoc ${args} -I ${ARG_IMPORT_DIR} ${ARG_IMPORT_DIR}/${rel}
      DEPENDS ${ARG_IMPORT_DIR}/${rel} protobuf::protoc
      COMMENT "protoc ${rel}"
      VERBATIM)
    target_sources(${ARG_TARGET} PRIVATE ${outputs})
  endforeach()
  target_include_directories(${ARG_TARGET} PUBLIC ${ARG_OUT_DIR})
endfunction()
