# MkBootstrap: the launch environment (torchrun, srun, mpirun), the TCP store the ranks meet
# through, and process groups that know which ranks share a node.
find_package(Threads REQUIRED)
add_library(MkBootstrap STATIC ${CMAKE_CURRENT_LIST_DIR}/Bootstrap.cpp)
target_include_directories(MkBootstrap PUBLIC ${PROJECT_SOURCE_DIR}/runtime/include)
target_link_libraries(MkBootstrap PRIVATE MkLog fmt::fmt-header-only Threads::Threads)
