#include "tools/comm-bench/single_copy.h"

#include <mpi.h>

#include <cstdlib>
#include <string>

#include "comm/mpi_check.h"

namespace zrt::bench {
namespace {

constexpr const char* kCvar = "btl_vader_single_copy_mechanism";

// The cvar's value after MPI_Init: vader writes the mechanism it settled on back into it when the
// requested one is unavailable, so this is what runs, not only what was asked for. Empty when
// MPI_T does not know the variable.
std::string fromMpiT() {
  // Ask for the level MPI already runs at: Open MPI lets MPI_T_init_thread overwrite the level
  // MPI_Query_thread reports, and the MPI backend refuses anything below MPI_THREAD_MULTIPLE.
  int level = MPI_THREAD_SINGLE, provided = 0;
  ZRT_CHECK_MPI(MPI_Query_thread(&level));
  if (MPI_T_init_thread(level, &provided) != MPI_SUCCESS) return {};
  std::string out;
  int index = -1;
  if (MPI_T_cvar_get_index(kCvar, &index) == MPI_SUCCESS) {
    char name[256], desc[1024];
    int nameLen = sizeof name, descLen = sizeof desc, verbosity = 0, bind = 0, scope = 0;
    MPI_Datatype type = MPI_DATATYPE_NULL;
    MPI_T_enum enumType = MPI_T_ENUM_NULL;
    MPI_T_cvar_handle handle = MPI_T_CVAR_HANDLE_NULL;
    int count = 0, value = 0;
    if (MPI_T_cvar_get_info(index, name, &nameLen, &verbosity, &type, &enumType, desc, &descLen,
                            &bind, &scope) == MPI_SUCCESS &&
        type == MPI_INT &&
        MPI_T_cvar_handle_alloc(index, nullptr, &handle, &count) == MPI_SUCCESS) {
      if (count == 1 && MPI_T_cvar_read(handle, &value) == MPI_SUCCESS) {
        out = std::to_string(value);  // the number, unless the enumeration names it
        int items = 0;
        char enumName[256];
        int enumNameLen = sizeof enumName;
        if (enumType != MPI_T_ENUM_NULL &&
            MPI_T_enum_get_info(enumType, &items, enumName, &enumNameLen) == MPI_SUCCESS) {
          for (int i = 0; i < items; ++i) {
            char item[256];
            int itemLen = sizeof item, itemValue = 0;
            if (MPI_T_enum_get_item(enumType, i, &itemValue, item, &itemLen) == MPI_SUCCESS &&
                itemValue == value)
              out = item;
          }
        }
      }
      MPI_T_cvar_handle_free(&handle);
    }
  }
  MPI_T_finalize();
  return out;
}

}  // namespace

std::string singleCopyMechanism() {
  if (std::string v = fromMpiT(); !v.empty()) return v + " (MPI_T cvar " + kCvar + ")";
  if (const char* env = std::getenv("OMPI_MCA_btl_vader_single_copy_mechanism"))
    return std::string(env) + " (OMPI_MCA_btl_vader_single_copy_mechanism)";
  return std::string("unknown (MPI_T has no ") + kCvar + ": not Open MPI's vader transport)";
}

}  // namespace zrt::bench
