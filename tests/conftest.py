import os
import sys

# tests import the reference semantics as `import naive`
sys.path.insert(0, os.path.dirname(__file__))
