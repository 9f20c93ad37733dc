# On Colab: install this book's library (Colab's own torch is kept).
import importlib.util
import subprocess
import sys
if ("google.colab" in sys.modules
        and importlib.util.find_spec("path_lib") is None):
    url = "git+https://github.com/path-attention/path-book"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", url],
                   check=True)
