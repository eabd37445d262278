// The report's stylesheet and script (src/report/assets/), compiled in so
// the report needs no files at run time.

#ifndef RESHARD_REPORT_REPORT_ASSETS_H_
#define RESHARD_REPORT_REPORT_ASSETS_H_

#include <string_view>

namespace reshard::internal {

extern const std::string_view kReportCss;
extern const std::string_view kReportJs;

}  // namespace reshard::internal

#endif  // RESHARD_REPORT_REPORT_ASSETS_H_
