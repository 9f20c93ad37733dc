# On Colab: install this book's library (Colab's own torch satisfies torch>=2.4 and is kept).
import importlib.util
import subprocess
import sys
if "google.colab" in sys.modules and importlib.util.find_spec("path_lib") is None:
    subprocess.run([sys.executable, "-m", "pip", "install", "-q",
                    "git+https://github.com/path-attention/path-book"], check=True)
