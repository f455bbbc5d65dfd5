// The PNG chart, drawn by gnuplot (a program, not a library: found on PATH at run time). gnuplot
// only ever sees paths in a private temporary directory; the finished image is moved to the
// caller's path.
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <vector>

#include "les/bench/report.h"
#include "les/util/error.h"

namespace les::bench {

namespace {

// Characters that could end a gnuplot string or break a label: dropped.
std::string plain(const std::string& s) {
  std::string o;
  for (const char c : s) {
    if (c != '\'' && c != '"' && c != '\\' && c != '\n') o += c;
  }
  return o;
}

}  // namespace

bool write_chart_png(const BenchReport& r, const std::string& png_path, std::string* why) {
  if (std::system("command -v gnuplot >/dev/null 2>&1") != 0) {
    *why = "gnuplot is not installed (apt-get install gnuplot-nox)";
    return false;
  }
  const char* t = std::getenv("TMPDIR");
  std::string tmpl = std::string(t ? t : "/tmp") + "/les-bench-chart-XXXXXX";
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  if (!::mkdtemp(buf.data())) {
    *why = "cannot create a temporary directory for the chart";
    return false;
  }
  const std::string dir = buf.data();
  struct Cleanup {
    std::string d;
    ~Cleanup() {
      std::error_code ec;
      std::filesystem::remove_all(d, ec);
    }
  } cleanup{dir};
  {
    std::ofstream data(dir + "/data.txt");
    for (const RowResult& x : r.rows) {
      if (published_ratio(x.kind) <= 0) continue;  // resident: not part of the staging
      const std::string ours = x.ran && std::isfinite(x.vs_baseline) ? strfmt("%.4f", x.vs_baseline) : "?";
      data << '"' << row_label(x.kind) << "\" " << ours << ' ' << strfmt("%.4f", published_ratio(x.kind)) << '\n';
    }
  }
  {
    std::ofstream gp(dir + "/chart.gp");
    gp << "set terminal pngcairo size 1000,560 font 'sans,11'\n"
       << "set output '" << dir << "/chart.png'\n"
       << "set title \"les bench: decode speed over the baseline, this machine beside the published staging\\n"
       << plain(r.model) << strfmt(", --mem %.1f MiB, -t %d", static_cast<double>(r.mem) / 1048576.0, r.threads)
       << "\"\n"
       << "set datafile missing '?'\n"
       << "set style data histograms\n"
       << "set style histogram clustered gap 1\n"
       << "set style fill solid 0.85 border -1\n"
       << "set ylabel 'decode tok/s / baseline decode tok/s'\n"
       << "set yrange [0:*]\n"
       << "set grid ytics\n"
       << "set key top left\n"
       << "plot '" << dir << "/data.txt' using 2:xtic(1) title 'les, this machine' lc rgb '#1f77b4', \\\n"
       << "     '' using 3 title 'published' lc rgb '#aaaaaa', \\\n"
       << "     '' using ($0-1.0/6):2:(sprintf('%.2fx',$2)) with labels offset 0,0.8 notitle, \\\n"
       << "     '' using ($0+1.0/6):3:(sprintf('%.2fx',$3)) with labels offset 0,0.8 notitle\n";
  }
  const std::string cmd = "gnuplot '" + dir + "/chart.gp' >'" + dir + "/log.txt' 2>&1";
  const int rc = std::system(cmd.c_str());
  std::error_code ec;
  if (rc != 0 || !std::filesystem::exists(dir + "/chart.png", ec)) {
    std::ifstream log(dir + "/log.txt");
    std::string first;
    std::getline(log, first);
    *why = "gnuplot failed" + (first.empty() ? std::string() : ": " + first);
    return false;
  }
  std::filesystem::copy_file(dir + "/chart.png", png_path, std::filesystem::copy_options::overwrite_existing, ec);
  if (ec) {
    *why = "cannot write " + png_path + ": " + ec.message();
    return false;
  }
  return true;
}

}  // namespace les::bench
