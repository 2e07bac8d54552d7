# MkJit: tile programs compiled through the pipeline and NVRTC, cached in memory and on disk,
# loaded through the driver.
add_library(MkJit STATIC ${CMAKE_CURRENT_LIST_DIR}/Jit.cpp)
target_include_directories(MkJit PUBLIC ${PROJECT_SOURCE_DIR}/runtime/include
                           PRIVATE ${PROJECT_SOURCE_DIR}/runtime/device)
target_link_libraries(MkJit PUBLIC MLIRMkPipeline MLIRParser MkDeviceHeaders MkCudaDriver MkLog)
