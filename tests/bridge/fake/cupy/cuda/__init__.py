class runtime:
    @staticmethod
    def getDevice():
        return 0
