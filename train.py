if __name__ == "__main__":
    # catch SIGTERM/SIGINT before the heavy imports: a stop during start-up exits 0 too
    from astrai.training.stopping import catch_stop_signals

    catch_stop_signals()

    from astrai.train import main

    main()
