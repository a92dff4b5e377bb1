import os, time
def mark(label):
    with open("/tmp/startup_trace.log", "a") as f:
        import sys; f.write(f"{time.time():.3f} {os.getpid()} {label} mlflow={'mlflow' in sys.modules}\n")
